// Command controller runs cert-manager's controllers out of cluster against a kubeconfig: the issuers
// controller, the CertificateRequest approver, the CA and self-signed CertificateRequest issuers, and the
// Certificate controllers (trigger, key manager, request manager, issuing, readiness, revision manager) —
// what manifests/cert-manager needs. It mirrors the release's cmd/controller/app Run loop (build a
// ContextFactory, construct each registered controller, start the informer factories) without its
// metrics, healthz and leader-election servers: one replica, started and stopped by the harness.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// Each package registers its controller with controller.Register in init.
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// The controllers this binary runs (their registered names).
var enabled = []string{
	"issuers",
	"certificaterequests-approver",
	"certificaterequests-issuer-ca",
	"certificaterequests-issuer-selfsigned",
	"certificates-trigger",
	"certificates-key-manager",
	"certificates-request-manager",
	"certificates-issuing",
	"certificates-readiness",
	"certificates-revision-manager",
}

func main() {
	// A FlagSet of its own: controller-runtime registers --kubeconfig on flag.CommandLine.
	flags := flag.NewFlagSet("controller", flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", "", "kubeconfig of the API server")
	namespace := flags.String("cluster-resource-namespace", "cert-manager", "namespace for ClusterIssuers' Secrets")
	workers := flags.Int("concurrent-workers", 5, "workers per controller")
	_ = flags.Parse(os.Args[1:])
	logf.InitLogs()
	defer logf.FlushLogs()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *namespace, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager controller:", err)
		os.Exit(1)
	}
}

func run(rootCtx context.Context, kubeconfig, namespace string, workers int) error {
	g, rootCtx := errgroup.WithContext(rootCtx)
	factory, err := controller.NewContextFactory(rootCtx, controller.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   50,
		KubernetesAPIBurst: 100,
		IssuerOptions:      controller.IssuerOptions{ClusterResourceNamespace: namespace},
		// The release's defaults (ControllerConfiguration v1alpha1).
		CertificateOptions: controller.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return err
	}
	cctx, err := factory.Build()
	if err != nil {
		return err
	}
	known := controller.Known()
	for _, name := range enabled {
		construct, ok := known[name]
		if !ok {
			return fmt.Errorf("controller %q is not registered (registered: %s)", name, names(known))
		}
		iface, err := construct(factory)
		if err != nil {
			return fmt.Errorf("controller %q: %w", name, err)
		}
		g.Go(func() error { return iface.Run(workers, rootCtx) })
	}
	cctx.SharedInformerFactory.Start(rootCtx.Done())
	cctx.KubeSharedInformerFactory.Start(rootCtx.Done())
	cctx.HTTP01ResourceMetadataInformersFactory.Start(rootCtx.Done())
	err = g.Wait()
	cctx.HTTP01ResourceMetadataInformersFactory.Shutdown()
	cctx.KubeSharedInformerFactory.Shutdown()
	cctx.SharedInformerFactory.Shutdown()
	return err
}

func names(known map[string]controller.Constructor) string {
	out := make([]string, 0, len(known))
	for n := range known {
		out = append(out, n)
	}
	return strings.Join(out, ", ")
}
