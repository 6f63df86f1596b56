// mpi-operator for the end-to-end harness: the MPI Operator's own v2beta1 controller
// (github.com/kubeflow/mpi-operator/pkg/controller, unchanged), wired as its cmd/mpi-operator/app
// Run does, but without what cannot run beside other harnesses on one machine: Run serves /healthz
// on port 8080 of every address (healthCheckPort, not a flag) and always elects a leader. Here
// /healthz is served on --healthz-address and the controller runs at once. --gang-scheduling
// (volcano, or the scheduler-plugins scheduler's name) is wired as Run wires it.
package main

import (
	"context"
	"flag"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	kubeinformers "k8s.io/client-go/informers"
	kubeclientset "k8s.io/client-go/kubernetes"
	clientgokubescheme "k8s.io/client-go/kubernetes/scheme"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/kubeflow/mpi-operator/cmd/mpi-operator/app/options"
	mpijobclientset "github.com/kubeflow/mpi-operator/pkg/client/clientset/versioned"
	kubeflowscheme "github.com/kubeflow/mpi-operator/pkg/client/clientset/versioned/scheme"
	informers "github.com/kubeflow/mpi-operator/pkg/client/informers/externalversions"
	controllersv1 "github.com/kubeflow/mpi-operator/pkg/controller"
	schedclientset "sigs.k8s.io/scheduler-plugins/pkg/generated/clientset/versioned"
	volcanoclient "volcano.sh/apis/pkg/client/clientset/versioned"
)

func main() {
	klog.InitFlags(nil)
	opt := options.NewServerOption()
	opt.AddFlags(flag.CommandLine)
	healthz := flag.String("healthz-address", "127.0.0.1:0", "address of /healthz (ok once the controller's caches are synced)")
	flag.Parse()
	cfg, err := clientcmd.BuildConfigFromFlags(opt.MasterURL, opt.Kubeconfig)
	if err != nil {
		klog.Fatalf("kubeconfig: %v", err)
	}
	cfg.QPS, cfg.Burst = float32(opt.QPS), opt.Burst
	kubeClient := kubeclientset.NewForConfigOrDie(cfg)
	mpiClient := mpijobclientset.NewForConfigOrDie(cfg)
	// --gang-scheduling, as upstream's createClientSets reads it: volcano, or any other name is the
	// scheduler-plugins scheduler's.
	var volcanoClient volcanoclient.Interface
	var schedClient schedclientset.Interface
	if opt.GangSchedulingName == options.GangSchedulerVolcano {
		volcanoClient = volcanoclient.NewForConfigOrDie(restclient.AddUserAgent(cfg, "volcano"))
	} else if opt.GangSchedulingName != "" {
		schedClient = schedclientset.NewForConfigOrDie(restclient.AddUserAgent(cfg, "scheduler-plugins"))
	}
	if err := kubeflowscheme.AddToScheme(clientgokubescheme.Scheme); err != nil {
		klog.Fatalf("scheme: %v", err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()

	var kubeOpts []kubeinformers.SharedInformerOption
	var mpiOpts []informers.SharedInformerOption
	if opt.Namespace != "" {
		kubeOpts = append(kubeOpts, kubeinformers.WithNamespace(opt.Namespace))
		mpiOpts = append(mpiOpts, informers.WithNamespace(opt.Namespace))
	}
	kubeInformers := kubeinformers.NewSharedInformerFactoryWithOptions(kubeClient, 0, kubeOpts...)
	mpiInformers := informers.NewSharedInformerFactoryWithOptions(mpiClient, 0, mpiOpts...)
	controller, err := controllersv1.NewMPIJobController(ctx, kubeClient, mpiClient, volcanoClient, schedClient,
		kubeInformers.Core().V1().ConfigMaps(), kubeInformers.Core().V1().Secrets(),
		kubeInformers.Core().V1().Services(), kubeInformers.Batch().V1().Jobs(), kubeInformers.Core().V1().Pods(),
		kubeInformers.Scheduling().V1().PriorityClasses(), mpiInformers.Kubeflow().V2beta1().MPIJobs(), opt)
	if err != nil {
		klog.Fatalf("controller: %v", err)
	}
	kubeInformers.Start(ctx.Done())
	mpiInformers.Start(ctx.Done())
	if controller.PodGroupCtrl != nil {
		controller.PodGroupCtrl.StartInformerFactory(ctx.Done())
	}
	synced := make(chan struct{})
	go func() {
		kubeInformers.WaitForCacheSync(ctx.Done())
		mpiInformers.WaitForCacheSync(ctx.Done())
		close(synced)
	}()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-synced:
			_, _ = w.Write([]byte("ok"))
		default:
			http.Error(w, "caches not synced", http.StatusServiceUnavailable)
		}
	})
	go func() {
		if err := http.ListenAndServe(*healthz, mux); err != nil {
			klog.Fatalf("/healthz: %v", err)
		}
	}()
	if err := controller.Run(opt.Threadiness, ctx.Done()); err != nil {
		klog.Errorf("controller: %v", err)
		os.Exit(1)
	}
}
