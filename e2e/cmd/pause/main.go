// pause is the real node's sandbox image (`testcluster --real-node`): it waits for SIGTERM or SIGINT and
// reaps the zombies of its pod's shared PID namespace. With -listen ADDR it also answers every HTTP
// request with 200 "ok", which the harness's tests use as a pod that serves and has a readiness probe.
// Built static (CGO_ENABLED=0) by `make pause-image`; testcluster packs it into a one-layer image.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	listen := flag.String("listen", "", "also serve HTTP 200 on this address")
	flag.Parse()
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	if *listen != "" {
		go func() {
			err := http.ListenAndServe(*listen, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				fmt.Fprintln(w, "ok")
			}))
			fmt.Fprintln(os.Stderr, "pause:", err)
			os.Exit(1)
		}()
	}
	for s := range signals {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			var status syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
