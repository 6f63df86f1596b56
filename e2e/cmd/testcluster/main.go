// testcluster runs a Kubernetes control plane on loopback for end-to-end tests: embedded etcd,
// kube-apiserver, kube-controller-manager (deployment, replicaset, garbage-collector and
// namespace controllers), kube-scheduler, a fake kubelet, and fake Nodes.
//
//	testcluster --dir DIR [--kubernetes 1.37|1.36] [--nodes FILE] [--scheduler-config FILE] [--crd FILE]... [--coscheduling]
//	            [--volcano [--volcano-vap] [--volcano-dir DIR]]
//	            [--training-operator [--training-operator-gang volcano|scheduler-plugins|none]]
//	            [--mpi-operator [--mpi-operator-gang volcano|scheduler-plugins|none]] [--koordinator]
//	            [--jobset] [--trainer] [--lws [--lws-gang volcano|none]] [--feature-gates GATES] [--real-node [--real-nodes N] [--image ARCHIVE]...]
//	            [--admission-control-config-file FILE]
//
// --kubernetes picks the Kubernetes minor of the control plane (and of the real node's kubelet): 1.37, the
// default, or 1.36, each built from its own release's modules (minors.go). --crd applies
// CustomResourceDefinitions before `ready`; --coscheduling also runs a second scheduler,
// scheduler-plugins-scheduler, with the Coscheduling plugin (coscheduling.go). --volcano also installs
// Volcano's CRDs and runs its admission webhooks, controller manager and scheduler (volcano.go), from
// the binaries `make testcluster-volcano` builds into bin/volcano/. --training-operator,
// --mpi-operator and --koordinator run Kubeflow training-operator, the MPI Operator and
// koord-scheduler with their CRDs; --jobset runs JobSet's controller and webhooks, --trainer also Kubeflow Trainer
// v2's (trainer.go); --lws runs LeaderWorkerSet's manager and webhooks, --lws-gang volcano with its Volcano gang
// scheduling (lws.go); --feature-gates passes Kubernetes feature gates (of the minor run) to the
// API server, kube-scheduler and kube-controller-manager (operators.go). --real-node also runs one Node,
// real-0, with the real kubelet and Debian's containerd (realnode.go; built and installed by `make
// testcluster-real-node`); stop removes everything it put on the machine, and so does the next
// --real-node start for a harness that was killed. --admission-control-config-file passes an
// AdmissionConfiguration to kube-apiserver (for example the kubeconfig whose client certificate the
// API server presents to webhooks); its relative paths are the API server's to resolve, so give
// absolute ones.
//
// It prints exactly one line, `ready DIR/kubeconfig`, on stdout once everything runs, and stops
// within 10 s of SIGTERM or SIGINT with exit status 0. SIGHUP restarts the API server (watches
// break, clients must re-list); SIGUSR1 compacts etcd to its current revision. Component logs go
// to DIR/<component>.log. A bad flag or --nodes file is one line on stderr and exit status 2.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

const usage = "usage: testcluster --dir DIR [--kubernetes 1.37|1.36] [--nodes FILE] [--scheduler-config FILE] [--crd FILE]... [--coscheduling] " +
	"[--volcano [--volcano-vap] [--volcano-dir DIR]] " +
	"[--training-operator [--training-operator-gang volcano|scheduler-plugins|none]] " +
	"[--mpi-operator [--mpi-operator-gang volcano|scheduler-plugins|none]] [--koordinator] [--jobset] [--trainer] " +
	"[--lws [--lws-gang volcano|none]] " +
	"[--feature-gates GATES] [--real-node [--real-nodes N] [--image ARCHIVE]...] [--admission-control-config-file FILE]"

type options struct {
	dir             string
	kubernetes      string
	nodesFile       string
	schedulerConfig string
	crds            crdFiles
	coscheduling    bool
	volcano         bool
	volcanoVAP      bool
	volcanoDir      string

	trainingOperator     bool
	trainingOperatorGang string
	mpiOperator          bool
	mpiOperatorGang      string
	koordinator          bool
	jobset               bool
	trainer              bool
	lws                  bool
	lwsGang              string
	featureGates         string
	realNode             bool
	realNodes            int
	images               crdFiles
	admissionConfig      string
}

func main() {
	if len(os.Args) > 1 {
		if code := runComponent(os.Args[1], os.Args[2:]); code >= 0 {
			os.Exit(code)
		}
	}
	os.Exit(run(os.Args[1:]))
}

func fail(code int, format string, args ...interface{}) int {
	fmt.Fprintf(os.Stderr, "testcluster: error: "+format+"\n", args...)
	return code
}

func run(args []string) int {
	fs := flag.NewFlagSet("testcluster", flag.ContinueOnError)
	fs.SetOutput(new(discard))
	var o options
	fs.StringVar(&o.dir, "dir", "", "directory for the kubeconfig, data and logs")
	fs.StringVar(&o.kubernetes, "kubernetes", defaultMinor, "the Kubernetes minor of the control plane, kubectl and kubelet: 1.37 or 1.36, each its own build (make testcluster, make testcluster-1.36)")
	fs.StringVar(&o.nodesFile, "nodes", "", "YAML file of Nodes (Node documents, or a List)")
	fs.StringVar(&o.schedulerConfig, "scheduler-config", "", "KubeSchedulerConfiguration file")
	fs.Var(&o.crds, "crd", "CustomResourceDefinition file to apply before ready (repeatable)")
	fs.BoolVar(&o.coscheduling, "coscheduling", false, "also run scheduler-plugins-scheduler (Coscheduling)")
	fs.BoolVar(&o.volcano, "volcano", false, "also run Volcano (webhooks, controllers, scheduler)")
	fs.BoolVar(&o.volcanoVAP, "volcano-vap", false, "with --volcano: also Volcano's ValidatingAdmissionPolicies")
	fs.StringVar(&o.volcanoDir, "volcano-dir", "", "Volcano's binaries and manifests (default: volcano/ beside this binary)")
	fs.BoolVar(&o.trainingOperator, "training-operator", false, "also run Kubeflow training-operator (TFJob, PyTorchJob)")
	fs.StringVar(&o.trainingOperatorGang, "training-operator-gang", "", "with --training-operator: its gang scheduler, volcano|scheduler-plugins|none")
	fs.BoolVar(&o.mpiOperator, "mpi-operator", false, "also run the MPI Operator (MPIJob v2beta1)")
	fs.StringVar(&o.mpiOperatorGang, "mpi-operator-gang", "", "with --mpi-operator: its gang scheduler (--gang-scheduling), volcano|scheduler-plugins|none")
	fs.BoolVar(&o.koordinator, "koordinator", false, "also run koord-scheduler (scheduler name koord-scheduler)")
	fs.BoolVar(&o.jobset, "jobset", false, "also run JobSet's controller and webhooks (JobSet v1alpha2; make testcluster-trainer)")
	fs.BoolVar(&o.trainer, "trainer", false, "also run Kubeflow Trainer v2's controller manager and webhooks (TrainJob; implies --jobset; make testcluster-trainer)")
	fs.BoolVar(&o.lws, "lws", false, "also run LeaderWorkerSet's manager and webhooks (LeaderWorkerSet v1; make testcluster-lws)")
	fs.StringVar(&o.lwsGang, "lws-gang", "", "with --lws: its gang scheduling provider (gangSchedulingManagement.schedulerProvider), volcano|none (default none; volcano needs --volcano)")
	fs.StringVar(&o.featureGates, "feature-gates", "", "Kubernetes feature gates, Name=true,... (API server, scheduler, controller-manager)")
	fs.BoolVar(&o.realNode, "real-node", false, "also run a Node, real-0, with the real kubelet and containerd (root; make testcluster-real-node)")
	fs.IntVar(&o.realNodes, "real-nodes", 1, "with --real-node: how many real nodes, real-0 .. real-(N-1), each its own containerd and kubelet")
	fs.Var(&o.images, "image", "with --real-node: an image archive (docker or OCI) to import into each real node's containerd (repeatable)")
	fs.StringVar(&o.admissionConfig, "admission-control-config-file", "", "an AdmissionConfiguration file for kube-apiserver (its --admission-control-config-file)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // -h, --help: the usage and the flags on stdout, exit 0
			fmt.Println(usage)
			fs.SetOutput(os.Stdout)
			fs.PrintDefaults()
			return 0
		}
		return fail(2, "%v; %s", err, usage)
	}
	if fs.NArg() > 0 {
		return fail(2, "unexpected argument %q; %s", fs.Arg(0), usage)
	}
	if o.dir == "" {
		return fail(2, "--dir is required; %s", usage)
	}
	if err := checkMinor(o.kubernetes); err != nil {
		return fail(2, "%v", err)
	}
	built, err := builtMinor()
	if err != nil {
		return fail(1, "%v", err)
	}
	if built != o.kubernetes {
		return execMinor(o.kubernetes)
	}
	nodes := defaultNodes()
	if o.nodesFile != "" {
		var err error
		if nodes, err = readNodes(o.nodesFile); err != nil {
			return fail(2, "%s: %v", o.nodesFile, err)
		}
	}
	var schedCfg []byte
	if o.schedulerConfig != "" {
		var err error
		if schedCfg, err = readSchedulerConfig(o.schedulerConfig); err != nil {
			return fail(2, "%s: %v", o.schedulerConfig, err)
		}
	}
	crds, err := readCRDs(o.crds)
	if err != nil {
		return fail(2, "--crd %v", err)
	}
	var coschedulingPath string
	if o.coscheduling {
		if coschedulingPath, err = checkCoscheduling(crds); err != nil {
			return fail(2, "%v", err)
		}
	}
	volcano, err := volcanoFlags(o)
	if err != nil {
		return fail(2, "%v", err)
	}
	operators, err := operatorFlags(o, built)
	if err != nil {
		return fail(2, "%v", err)
	}
	countSet := false
	fs.Visit(func(f *flag.Flag) { countSet = countSet || f.Name == "real-nodes" })
	reals, err := realNodeFlags(o, countSet)
	if err != nil {
		return fail(2, "%v", err)
	}
	admissionConfig := ""
	if o.admissionConfig != "" {
		if admissionConfig, err = filepath.Abs(o.admissionConfig); err == nil {
			_, err = os.Stat(admissionConfig)
		}
		if err != nil {
			return fail(2, "--admission-control-config-file: %v", err)
		}
	}
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return fail(2, "--dir %q: %v", o.dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(2, "--dir %q: %v", o.dir, err)
	}

	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	newCluster := func() *cluster {
		return &cluster{dir: dir, nodes: nodes, schedulerConfig: schedCfg, crds: crds, coschedulingPath: coschedulingPath,
			volcano: volcano, operators: operators, realNodes: reals, admissionConfig: admissionConfig,
			failed: make(chan error, 4)}
	}
	c, attempt, ready := newCluster(), 1, false
	c.takeAPIPort = os.Getenv("TESTCLUSTER_TAKE_API_PORT") == "1"
	attemptCtx, cancelAttempt := context.WithCancel(ctx)
	started := make(chan error, 1)
	go func(c *cluster) { started <- c.start(attemptCtx) }(c)
	// failed ends this attempt: before `ready`, an attempt whose component found its port taken starts again with
	// other ports (freePorts: a port picked free can be bound by another process before its component binds it).
	failed := func(err error) (retried bool) {
		cancelAttempt()
		c.stop()
		if ready || attempt >= startAttempts || !c.portTaken(err) {
			return false
		}
		select { // the attempt's start returns once its context is cancelled; its components are stopped
		case <-started:
		case <-time.After(time.Minute):
		}
		kept := filepath.Join(dir, fmt.Sprintf("attempt-%d", attempt))
		if err := c.keepLogs(kept); err != nil {
			fmt.Fprintf(os.Stderr, "testcluster: %v\n", err)
		}
		fmt.Fprintf(os.Stderr, "testcluster: attempt %d: %v: a port was taken; starting again with other ports "+
			"(its logs in %s)\n", attempt, err, kept)
		attempt++
		c = newCluster()
		attemptCtx, cancelAttempt = context.WithCancel(ctx)
		started = make(chan error, 1)
		go func(c *cluster) { started <- c.start(attemptCtx) }(c)
		return true
	}
	defer func() { cancelAttempt() }()
	for {
		select {
		case err := <-started:
			if err != nil {
				select { // a component's exit that ended the start says why in its own words
				case exited := <-c.failed:
					err = exited
				case <-time.After(time.Second):
				}
				if failed(err) {
					continue
				}
				return fail(1, "%v (logs in %s)", err, dir)
			}
			ready = true
			fmt.Printf("ready %s\n", filepath.Join(dir, "kubeconfig"))
		case err := <-c.failed:
			if failed(err) {
				continue
			}
			return fail(1, "%v (logs in %s)", err, dir)
		case s := <-signals:
			switch s {
			case syscall.SIGHUP:
				go c.restartAPIServer(ctx)
			case syscall.SIGUSR1:
				go c.compactEtcd(ctx)
			default:
				cancel()
				c.stop()
				return 0
			}
		}
	}
}

// volcanoFlags checks --volcano, --volcano-vap and --volcano-dir.
func volcanoFlags(o options) (*volcanoOptions, error) {
	if !o.volcano {
		if o.volcanoVAP || o.volcanoDir != "" {
			return nil, fmt.Errorf("--volcano-vap and --volcano-dir need --volcano; %s", usage)
		}
		return nil, nil
	}
	dir := o.volcanoDir
	if dir == "" {
		root, err := binRoot()
		if err != nil {
			return nil, err
		}
		dir = filepath.Join(root, "volcano")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := checkVolcanoDir(dir); err != nil {
		return nil, fmt.Errorf("--volcano: %v", err)
	}
	return &volcanoOptions{dir: dir, vap: o.volcanoVAP}, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

var errTimeout = errors.New("timed out")

// poll calls f every interval until it returns true, an error, or the deadline passes.
func poll(ctx context.Context, interval, timeout time.Duration, f func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := f()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w after %s: %v", errTimeout, timeout, last)
			}
			return fmt.Errorf("%w after %s", errTimeout, timeout)
		case <-time.After(interval):
		}
	}
}
