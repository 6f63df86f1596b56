package main

// The job operators and the third scheduler gang scheduling is proved with (issue 21), each from
// the binaries and CRDs its own make target puts in a directory of the bin directory (binRoot, minors.go):
//
//   - --training-operator: Kubeflow training-operator (kubeflow.org/v1 TFJob, PyTorchJob, ...), from
//     bin/training-operator/ (make testcluster-training-operator); --training-operator-gang
//     volcano|scheduler-plugins|none is its --gang-scheduler-name (volcano needs --volcano,
//     scheduler-plugins needs --coscheduling and names its profile, scheduler-plugins-scheduler);
//   - --mpi-operator: the MPI Operator (kubeflow.org/v2beta1 MPIJob), from bin/mpi-operator/
//     (make testcluster-mpi-operator); --mpi-operator-gang volcano|scheduler-plugins|none is its
//     --gang-scheduling (none, the default: no gang scheduling of its own; volcano needs --volcano,
//     scheduler-plugins needs --coscheduling and names its profile);
//   - --koordinator: koord-scheduler (scheduler name koord-scheduler) with its Coscheduling (gang)
//     plugin and every CRD of Koordinator's release, from bin/koordinator/ (make
//     testcluster-koordinator);
//   - --jobset and --trainer (implies --jobset): JobSet's controller and Kubeflow Trainer v2's controller
//     manager, from bin/trainer/ (make testcluster-trainer; trainer.go);
//   - --lws: LeaderWorkerSet's manager, from bin/lws/ (make testcluster-lws); --lws-gang volcano|none is its
//     gangSchedulingManagement.schedulerProvider (none, the default: no gang scheduling; volcano needs --volcano)
//     (lws.go);
//   - --feature-gates GATES: Kubernetes feature gates for the API server, kube-scheduler and
//     kube-controller-manager, each a gate of the minor run (--kubernetes); with GenericWorkload the API
//     server also serves the minor's version of scheduling.k8s.io Workload and PodGroup (1.36: v1alpha2,
//     alpha; 1.37: v1beta1, beta), with CompositePodGroup on 1.37 also v1alpha3 (CompositePodGroup): APIs
//     that are off unless --runtime-config asks for them.
//
// Each one's CRDs are applied and Established, and each answers its health endpoint, before
// `ready` is printed; one that exits before then fails the start with its log named.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/featuregate"
	"sigs.k8s.io/yaml"
)

const (
	trainingOperatorName = "training-operator"
	mpiOperatorName      = "mpi-operator"
	koordSchedulerName   = "koord-scheduler"
	// kubeflowNamespace is where training-operator keeps its webhook Secret (MY_POD_NAMESPACE).
	kubeflowNamespace = "kubeflow"
	// trainingOperatorSecret is the Secret its certificate rotator fills (--webhook-secret-name default).
	trainingOperatorSecret = "training-operator-webhook-cert"
	// koordinatorNamespace: koord-scheduler's ElasticQuota plugin reads quota groups from it.
	koordinatorNamespace = "koordinator-system"
)

// trainingOperatorGangs are the values of --training-operator-gang.
var trainingOperatorGangs = []string{"none", "scheduler-plugins", "volcano"}

// gangFlag checks --<name>-gang (the MPI Operator's --gang-scheduling): it needs --<name>, and the
// scheduler whose PodGroups it makes. "" is none.
func gangFlag(name string, on bool, value string, o options) (string, error) {
	if value != "" && !on {
		return "", fmt.Errorf("--%s-gang needs --%s; %s", name, name, usage)
	}
	if value == "" {
		value = "none"
	}
	if !contains(trainingOperatorGangs, value) {
		return "", fmt.Errorf("--%s-gang %q: must be one of %s", name, value, strings.Join(trainingOperatorGangs, ", "))
	}
	if value == "volcano" && !o.volcano {
		return "", fmt.Errorf("--%s-gang volcano needs --volcano (the operator creates Volcano PodGroups)", name)
	}
	if value == "scheduler-plugins" && !o.coscheduling {
		return "", fmt.Errorf("--%s-gang scheduler-plugins needs --coscheduling (the operator names its scheduler, %s)",
			name, coschedulingSchedulerName)
	}
	return value, nil
}

// component is one extra program: its directory (binary and crd/*.yaml) in the bin directory (binRoot).
type component struct {
	name string // flag and directory
	dir  string
	bin  string
}

// findComponent checks that `make <target>` has built the component's binary and copied its CRDs.
func findComponent(name, binary string) (*component, error) {
	root, err := binRoot()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, name)
	bin := filepath.Join(dir, binary)
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("--%s: %s: not built (make testcluster-%s)", name, bin, name)
	}
	if crds, _ := filepath.Glob(filepath.Join(dir, "crd", "*.yaml")); len(crds) == 0 {
		return nil, fmt.Errorf("--%s: %s: no CRDs (make testcluster-%s copies them)", name, filepath.Join(dir, "crd"), name)
	}
	return &component{name: name, dir: dir, bin: bin}, nil
}

// operatorOptions is what --training-operator, --mpi-operator, --koordinator, --jobset, --trainer and
// --feature-gates ask for.
type operatorOptions struct {
	trainingOperator *component
	gang             string // --training-operator-gang: none, scheduler-plugins or volcano
	mpiOperator      *component
	mpiGang          string // --mpi-operator-gang: none, scheduler-plugins or volcano
	koordinator      *component
	jobset           *component // --jobset, or --trainer (trainer.go)
	trainer          *component // --trainer
	lws              *component // --lws
	lwsGang          string     // --lws-gang: none or volcano
	featureGates     string
	minor            string // the Kubernetes minor run (--kubernetes)
}

// operatorFlags checks the flags of this file against each other and against --coscheduling and --volcano.
func operatorFlags(o options, minor string) (*operatorOptions, error) {
	out := &operatorOptions{gang: o.trainingOperatorGang, featureGates: o.featureGates, minor: minor}
	var err error
	if o.trainingOperatorGang != "" && !o.trainingOperator {
		return nil, fmt.Errorf("--training-operator-gang needs --training-operator; %s", usage)
	}
	if out.gang == "" {
		out.gang = "none"
	}
	if !contains(trainingOperatorGangs, out.gang) {
		return nil, fmt.Errorf("--training-operator-gang %q: must be one of %s", out.gang, strings.Join(trainingOperatorGangs, ", "))
	}
	if out.gang == "volcano" && !o.volcano {
		return nil, fmt.Errorf("--training-operator-gang volcano needs --volcano (the operator creates Volcano PodGroups)")
	}
	if out.gang == "scheduler-plugins" && !o.coscheduling {
		return nil, fmt.Errorf("--training-operator-gang scheduler-plugins needs --coscheduling (the operator names its scheduler, %s)",
			coschedulingSchedulerName)
	}
	if out.mpiGang, err = gangFlag("mpi-operator", o.mpiOperator, o.mpiOperatorGang, o); err != nil {
		return nil, err
	}
	if err := checkFeatureGates(o.featureGates, minor); err != nil {
		return nil, err
	}
	if o.trainingOperator {
		if out.trainingOperator, err = findComponent(trainingOperatorName, "training-operator"); err != nil {
			return nil, err
		}
	}
	if o.mpiOperator {
		if out.mpiOperator, err = findComponent(mpiOperatorName, "mpi-operator"); err != nil {
			return nil, err
		}
	}
	if o.koordinator {
		if out.koordinator, err = findComponent("koordinator", koordSchedulerName); err != nil {
			return nil, err
		}
	}
	if err := trainerFlags(o, out); err != nil {
		return nil, err
	}
	if err := lwsFlags(o, out); err != nil {
		return nil, err
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// checkFeatureGates: GATES is Name=true|false[,Name=true|false...], each Name a feature gate of the Kubernetes
// minor this binary is built with (a gate a release removed, as 1.37 removed GangScheduling, would stop its
// components at start with their own error; here it is one line naming the minor).
func checkFeatureGates(gates, minor string) error {
	if gates == "" {
		return nil
	}
	known := utilfeature.DefaultMutableFeatureGate.GetAll()
	for _, kv := range strings.Split(gates, ",") {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return fmt.Errorf("--feature-gates %q: %q is not Name=true|false", gates, kv)
		}
		if _, err := strconv.ParseBool(value); err != nil {
			return fmt.Errorf("--feature-gates %q: %s: %q is not true or false", gates, name, value)
		}
		if _, ok := known[featuregate.Feature(name)]; !ok {
			return fmt.Errorf("--feature-gates %q: %s is not a feature gate of Kubernetes %s", gates, name, minor)
		}
	}
	return nil
}

// gateOn says whether GATES turns the named gate on.
func gateOn(gates, name string) bool {
	for _, kv := range strings.Split(gates, ",") {
		if n, v, _ := strings.Cut(kv, "="); n == name {
			on, _ := strconv.ParseBool(v)
			return on
		}
	}
	return false
}

// featureGateArgs are the flags every Kubernetes component gets for --feature-gates.
func (o *operatorOptions) featureGateArgs() []string {
	if o == nil || o.featureGates == "" {
		return nil
	}
	return []string{"--feature-gates=" + o.featureGates}
}

// apiServerArgs: the feature gates, and the minor's scheduling.k8s.io version of Workload and PodGroup when
// GenericWorkload is on (alpha in 1.36, beta in 1.37: neither is served unless --runtime-config enables it), and
// 1.37's v1alpha3 when CompositePodGroup is on too.
func (o *operatorOptions) apiServerArgs() []string {
	args := o.featureGateArgs()
	if o == nil || !gateOn(o.featureGates, "GenericWorkload") {
		return args
	}
	apis := []string{"scheduling.k8s.io/" + workloadAPIVersions[o.minor] + "=true"}
	if v := compositePodGroupAPIVersion[o.minor]; v != "" && gateOn(o.featureGates, "CompositePodGroup") {
		apis = append(apis, "scheduling.k8s.io/"+v+"=true")
	}
	return append(args, "--runtime-config="+strings.Join(apis, ","))
}

// componentCRDs reads the crd/*.yaml of a component's directory.
func componentCRDs(c *component) ([]*unstructured.Unstructured, error) {
	paths, _ := filepath.Glob(filepath.Join(c.dir, "crd", "*.yaml"))
	sort.Strings(paths)
	crds, err := readCRDs(paths)
	if err != nil {
		return nil, fmt.Errorf("%s CRDs: %v", c.name, err)
	}
	return crds, nil
}

// startOperators installs the CRDs of each asked-for component and starts it; it returns once each
// answers its health endpoint and, for the operators, reconciles a job (training-operator: its
// validating webhook answers too).
func (c *cluster) startOperators(ctx context.Context, client *kubernetes.Clientset) error {
	o := c.operators
	if o == nil {
		return nil
	}
	dyn, err := c.dynamicClient()
	if err != nil {
		return err
	}
	for _, comp := range []*component{o.trainingOperator, o.mpiOperator, o.koordinator} {
		if comp == nil {
			continue
		}
		crds, err := componentCRDs(comp)
		if err != nil {
			return err
		}
		if err := applyCRDs(ctx, dyn, crds); err != nil {
			return fmt.Errorf("%s: %v", comp.name, err)
		}
	}
	crds, err := o.trainerCRDs()
	if err != nil {
		return err
	}
	if err := applyCRDs(ctx, dyn, crds); err != nil {
		return fmt.Errorf("%s: %v", trainerDir, err)
	}
	if o.lws != nil {
		crds, err := componentCRDs(o.lws)
		if err != nil {
			return err
		}
		if err := applyCRDs(ctx, dyn, crds); err != nil {
			return fmt.Errorf("%s: %v", lwsName, err)
		}
	}
	if o.koordinator != nil {
		if err := c.startKoordScheduler(ctx, client); err != nil {
			return fmt.Errorf("%s: %v", koordSchedulerName, err)
		}
	}
	if o.trainingOperator != nil {
		if err := c.startTrainingOperator(ctx, client); err != nil {
			return fmt.Errorf("%s: %v", trainingOperatorName, err)
		}
	}
	if o.mpiOperator != nil {
		if err := c.startMPIOperator(ctx, client); err != nil {
			return fmt.Errorf("%s: %v", mpiOperatorName, err)
		}
	}
	if err := c.startTrainerControllers(ctx, client, dyn); err != nil {
		return err
	}
	if o.lws != nil {
		if err := c.startLWS(ctx, client, dyn); err != nil {
			return fmt.Errorf("%s: %v", lwsName, err)
		}
	}
	return nil
}

func ensureNamespace(ctx context.Context, client kubernetes.Interface, name string) error {
	_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}},
		metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %v", name, err)
	}
	return nil
}

// trainingOperatorWebhooks are the validating webhooks of training-operator v1.9
// (manifests/base/webhook/manifests.yaml) of the kinds it runs here (--enable-scheme).
var trainingOperatorWebhooks = []struct{ kind, resource string }{{"tfjob", "tfjobs"}, {"pytorchjob", "pytorchjobs"}}

// startTrainingOperator runs training-operator out of cluster. Its certificate rotator needs its
// Secret to exist and checks that the serving certificate exists at a fixed path
// (/tmp/k8s-webhook-server/serving-certs/tls.crt, pkg/cert); its webhook server reads the
// certificate from $TMPDIR/k8s-webhook-server/serving-certs, which here is the cluster's
// directory holding the harness's loopback serving certificate. Its validating webhooks are
// registered by URL under a name the rotator does not touch (it would put its own CA in them).
func (c *cluster) startTrainingOperator(ctx context.Context, client *kubernetes.Clientset) error {
	if err := ensureNamespace(ctx, client, kubeflowNamespace); err != nil {
		return err
	}
	_, err := client.CoreV1().Secrets(kubeflowNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: trainingOperatorSecret}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("secret %s: %v", trainingOperatorSecret, err)
	}
	tmp := filepath.Join(c.dir, trainingOperatorName+"-tmp")
	certs := filepath.Join(tmp, "k8s-webhook-server", "serving-certs")
	if err := copyServingCert(c.pki, certs); err != nil {
		return err
	}
	// The rotator only checks that this file exists; it never reads it.
	if err := ensureFile("/tmp/k8s-webhook-server/serving-certs/tls.crt", c.pki.servingCert); err != nil {
		return err
	}
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	webhookPort, healthPort, metricsPort := ports[0], ports[1], ports[2]
	args := []string{
		"--webhook-server-port=" + strconv.Itoa(webhookPort),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(healthPort),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(metricsPort),
		"--leader-elect=false", "--enable-scheme=tfjob", "--enable-scheme=pytorchjob",
		"--kube-api-qps=100", "--kube-api-burst=200",
	}
	switch c.operators.gang {
	case "volcano":
		args = append(args, "--gang-scheduler-name=volcano")
	case "scheduler-plugins":
		args = append(args, "--gang-scheduler-name="+coschedulingSchedulerName)
	}
	c.launchEnv(trainingOperatorName, c.operators.trainingOperator.bin, args,
		"KUBECONFIG="+c.kubeconfig, "TMPDIR="+tmp, "MY_POD_NAMESPACE="+kubeflowNamespace)
	if err := registerTrainingOperatorWebhooks(ctx, client, webhookPort, c.pki.caCert); err != nil {
		return err
	}
	if err := waitURLHealthy(ctx, trainingOperatorName, fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort),
		3*time.Minute, func() error { return c.exited(trainingOperatorName) }); err != nil {
		return err
	}
	dyn, err := c.dynamicClient()
	if err != nil {
		return err
	}
	return c.waitTrainingOperatorAdmission(ctx, dyn, 2*time.Minute)
}

func copyServingCert(p *pki, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for src, dst := range map[string]string{p.servingCert: "tls.crt", p.servingKey: "tls.key"} {
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, dst), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// ensureFile creates path (and its directory) from src when it does not exist yet.
func ensureFile(path, src string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path+".tmp"+strconv.Itoa(os.Getpid()), data, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp"+strconv.Itoa(os.Getpid()), path)
}

func registerTrainingOperatorWebhooks(ctx context.Context, client kubernetes.Interface, port int, caBundle []byte) error {
	fail := admissionv1.Fail
	none := admissionv1.SideEffectClassNone
	var hooks []admissionv1.ValidatingWebhook
	for _, w := range trainingOperatorWebhooks {
		url := fmt.Sprintf("https://127.0.0.1:%d/validate-kubeflow-org-v1-%s", port, w.kind)
		hooks = append(hooks, admissionv1.ValidatingWebhook{
			Name:         "validator." + w.kind + ".training-operator.kubeflow.org",
			ClientConfig: admissionv1.WebhookClientConfig{URL: &url, CABundle: caBundle},
			Rules: []admissionv1.RuleWithOperations{{
				Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
				Rule: admissionv1.Rule{APIGroups: []string{"kubeflow.org"}, APIVersions: []string{"v1"},
					Resources: []string{w.resource}}}},
			FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
		})
	}
	_, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx,
		&admissionv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "testcluster-training-operator"},
			Webhooks: hooks}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("validating webhooks: %v", err)
	}
	return nil
}

var tfJobResource = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "tfjobs"}

// waitTrainingOperatorAdmission: a dry-run TFJob without a container named tensorflow is denied by
// training-operator's own validating webhook (pkg/webhooks/tensorflow).
func (c *cluster) waitTrainingOperatorAdmission(ctx context.Context, dyn dynamic.Interface, timeout time.Duration) error {
	if dyn == nil {
		return fmt.Errorf("no client")
	}
	job := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
		"metadata": map[string]interface{}{"name": "testcluster-probe", "namespace": "default"},
		"spec": map[string]interface{}{"tfReplicaSpecs": map[string]interface{}{"Worker": map[string]interface{}{
			"replicas": int64(1), "template": map[string]interface{}{"spec": map[string]interface{}{
				"containers": []interface{}{map[string]interface{}{"name": "not-tensorflow", "image": "registry.example/probe:1"}}}}}}},
	}}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	err := poll(ctx, 500*time.Millisecond, timeout, func() (bool, error) {
		if err := c.exited(trainingOperatorName); err != nil {
			return false, err
		}
		_, err := dyn.Resource(tfJobResource).Namespace("default").Create(ctx, job, dry)
		if err != nil && strings.Contains(err.Error(), "validator.tfjob.training-operator.kubeflow.org") &&
			strings.Contains(err.Error(), "tensorflow") {
			return true, nil
		}
		return false, fmt.Errorf("a TFJob without a tensorflow container was not denied by its webhook: %v", err)
	})
	if err != nil {
		return fmt.Errorf("webhook: %v", err)
	}
	return nil
}

// mpiGangArgs: the MPI Operator's --gang-scheduling for --mpi-operator-gang (volcano, or the name of
// the scheduler-plugins scheduler, which it sets as every pod's schedulerName).
func mpiGangArgs(gang string) []string {
	switch gang {
	case "volcano":
		return []string{"--gang-scheduling=volcano"}
	case "scheduler-plugins":
		return []string{"--gang-scheduling=" + coschedulingSchedulerName}
	}
	return nil
}

// startMPIOperator runs the MPI Operator's v2beta1 controller (e2e/mpi-operator/main.go: upstream's
// cmd serves /healthz on the fixed port 8080 and always elects a leader) and waits for its /healthz
// (its informers synced).
func (c *cluster) startMPIOperator(ctx context.Context, client *kubernetes.Clientset) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	c.launchEnv(mpiOperatorName, c.operators.mpiOperator.bin, append([]string{
		"--kubeConfig=" + c.kubeconfig, "--healthz-address=127.0.0.1:" + strconv.Itoa(ports[0]),
		"--threadiness=2", "--kube-api-qps=100", "--kube-api-burst=200",
	}, mpiGangArgs(c.operators.mpiGang)...))
	return waitURLHealthy(ctx, mpiOperatorName, fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[0]), 3*time.Minute,
		func() error { return c.exited(mpiOperatorName) })
}

// koordSchedulerConfig: one profile, koord-scheduler, with the default plugins plus Koordinator's
// Coscheduling (gang) plugin at the extension points Koordinator's own scheduler-config.yaml
// (config/manager) enables it, and its default match policy and wait time.
func (c *cluster) koordSchedulerConfig() map[string]interface{} {
	on := func(names ...string) map[string]interface{} {
		var list []interface{}
		for _, n := range names {
			list = append(list, map[string]interface{}{"name": n})
		}
		return map[string]interface{}{"enabled": list}
	}
	return c.kubeSchedulerConfig(map[string]interface{}{
		"schedulerName": koordSchedulerName,
		"plugins": map[string]interface{}{
			"preEnqueue": on("Coscheduling"),
			"queueSort": map[string]interface{}{
				"disabled": []interface{}{map[string]interface{}{"name": "*"}},
				"enabled":  []interface{}{map[string]interface{}{"name": "PrioritySort"}},
			},
			"preFilter":  on("Coscheduling"),
			"postFilter": on("Coscheduling"),
			"preScore":   on("Coscheduling"),
			"reserve":    on("Coscheduling"),
			"permit":     on("Coscheduling"),
			"preBind":    on("Coscheduling"),
			"postBind":   on("Coscheduling"),
		},
	})
}

// startKoordScheduler runs koord-scheduler and waits for its /healthz.
func (c *cluster) startKoordScheduler(ctx context.Context, client *kubernetes.Clientset) error {
	if err := ensureNamespace(ctx, client, koordinatorNamespace); err != nil {
		return err
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	out, err := yaml.Marshal(c.koordSchedulerConfig())
	if err != nil {
		return err
	}
	path := filepath.Join(c.dir, koordSchedulerName+"-config.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return err
	}
	c.launchExec(koordSchedulerName, c.operators.koordinator.bin, append([]string{
		"--config=" + path, "--secure-port=" + strconv.Itoa(ports[0]), "--bind-address=127.0.0.1",
		"--authentication-kubeconfig=" + c.kubeconfig, "--authorization-kubeconfig=" + c.kubeconfig,
		"--profiling=false", "--v=3",
	}, c.operators.featureGateArgsForKoord()...))
	return waitURLHealthy(ctx, koordSchedulerName, fmt.Sprintf("https://127.0.0.1:%d/healthz", ports[0]), 3*time.Minute,
		func() error { return c.exited(koordSchedulerName) })
}

// featureGateArgsForKoord: koord-scheduler is built on Kubernetes 1.35 and has gates of its own;
// --feature-gates are gates of the minor run, so it gets none of them.
func (o *operatorOptions) featureGateArgsForKoord() []string { return nil }

// controllers: kube-controller-manager's controllers, plus the Job controller for the MPI Operator
// (v2beta1 runs the launcher as a batch/v1 Job) and for JobSet (a JobSet's replicated jobs are batch/v1 Jobs).
func (o *operatorOptions) controllers() string {
	if o != nil && (o.mpiOperator != nil || o.jobset != nil) {
		return controllers + ",job-controller"
	}
	return controllers
}
