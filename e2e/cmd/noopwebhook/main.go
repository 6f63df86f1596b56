// Command noopwebhook is the floor of bench/bench_apiserver.py: a mutating admission webhook on
// Go's standard library alone that admits every object unchanged. What the API server spends on
// calling it (its TLS client, encoding the AdmissionReview, reading the answer) is the cost of
// calling any webhook; a real webhook's added latency is judged against it.
//
// It serves POST /mutate and GET /healthz over TLS with net/http's defaults, so it offers HTTP/2 by
// ALPN as most Go webhooks do (--http1: HTTP/1.1 only). The API server takes HTTP/2 only from a webhook
// it reaches by a loopback URL; through a Service it asks for HTTP/1.1 (k8s.io/apiserver
// pkg/util/webhook/client.go, kubernetes#75791).
//
// --spread makes it the floor of a webhook that mutates: it answers a Deployment without spread
// constraints with a JSON patch adding a zone and a host constraint that select the Deployment's
// own pods (what policylib writes by default), so the API server's cost of applying a patch is
// counted as it is for policylib.
// Usage: noopwebhook --cert tls.crt --key tls.key --addr 127.0.0.1:PORT [--http1] [--spread]
package main

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
)

// review is the part of an admission.k8s.io/v1 AdmissionReview this webhook reads.
type review struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID    string `json:"uid"`
		Object *struct {
			Spec struct {
				Selector *struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				Template struct {
					Spec struct {
						TopologySpreadConstraints []json.RawMessage `json:"topologySpreadConstraints"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		} `json:"object"`
	} `json:"request"`
}

type response struct {
	UID       string `json:"uid"`
	Allowed   bool   `json:"allowed"`
	PatchType string `json:"patchType,omitempty"`
	Patch     []byte `json:"patch,omitempty"`
}

type constraint struct {
	MaxSkew           int                          `json:"maxSkew"`
	TopologyKey       string                       `json:"topologyKey"`
	WhenUnsatisfiable string                       `json:"whenUnsatisfiable"`
	LabelSelector     map[string]map[string]string `json:"labelSelector"`
	NodeTaintsPolicy  string                       `json:"nodeTaintsPolicy"`
}

var spread = false

// spreadPatch adds a zone and a host constraint selecting the Deployment's own pods, when it has none.
func spreadPatch(in *review) []byte {
	obj := in.Request.Object
	if obj == nil || obj.Spec.Selector == nil || len(obj.Spec.Selector.MatchLabels) == 0 ||
		len(obj.Spec.Template.Spec.TopologySpreadConstraints) > 0 {
		return nil
	}
	selector := map[string]map[string]string{"matchLabels": obj.Spec.Selector.MatchLabels}
	value := []constraint{
		{1, "topology.kubernetes.io/zone", "ScheduleAnyway", selector, "Honor"},
		{1, "kubernetes.io/hostname", "ScheduleAnyway", selector, "Honor"},
	}
	patch, _ := json.Marshal([]map[string]any{
		{"op": "add", "path": "/spec/template/spec/topologySpreadConstraints", "value": value}})
	return patch
}

type answer struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Response   response `json:"response"`
}

const maxBody = 3 << 20

func mutate(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		http.Error(w, "body unreadable or too large", http.StatusBadRequest)
		return
	}
	var in review
	if err := json.Unmarshal(body, &in); err != nil || in.Request == nil || in.Request.UID == "" {
		http.Error(w, "not an AdmissionReview with request.uid", http.StatusBadRequest)
		return
	}
	resp := response{UID: in.Request.UID, Allowed: true}
	if spread {
		if patch := spreadPatch(&in); patch != nil {
			resp.PatchType, resp.Patch = "JSONPatch", patch
		}
	}
	out, _ := json.Marshal(answer{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview", Response: resp})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func main() {
	cert := flag.String("cert", "", "serving certificate (PEM)")
	key := flag.String("key", "", "its private key (PEM)")
	addr := flag.String("addr", "127.0.0.1:8443", "address to listen on")
	http1 := flag.Bool("http1", false, "offer HTTP/1.1 only (no HTTP/2 by ALPN)")
	flag.BoolVar(&spread, "spread", false, "add a zone and a host spread constraint to Deployments without any")
	flag.Parse()
	if *cert == "" || *key == "" {
		fmt.Fprintln(os.Stderr, "noopwebhook: --cert and --key are required")
		os.Exit(2)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate", mutate)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	server := &http.Server{Addr: *addr, Handler: mux}
	if *http1 {
		server.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	log.Printf("noopwebhook serving https://%s (HTTP/2 offered: %v)", *addr, !*http1)
	log.Fatal(server.ListenAndServeTLS(*cert, *key))
}
