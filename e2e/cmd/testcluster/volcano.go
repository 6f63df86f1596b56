package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// Volcano in the cluster (--volcano): its CRDs, admission webhooks (registered by URL on loopback,
// served with the harness's certificates), controller manager and scheduler, all from the
// binaries and manifests `make testcluster-volcano` puts in e2e/bin/volcano/ (built from the
// volcano.sh/volcano module; e2e/volcano/go.mod says which release).

// volcanoNamespace is where Volcano's components look for their ConfigMaps (the HyperNode
// discovery configuration: ConfigMap volcano-controller-configmap, key volcano-controller.conf).
const volcanoNamespace = "volcano-system"

// volcanoControllers are the controllers of vc-controller-manager that run: jobs, their PodGroups,
// queues, garbage collection of finished jobs and HyperNode discovery.
const volcanoControllers = "job-controller,pg-controller,queue-controller,gc-controller,hyperNode-controller"

// volcanoWebhook is one admission path of vc-webhook-manager and the configuration that sends it
// reviews, as Volcano's chart registers it (installer/helm/chart/volcano/templates/webhooks.yaml).
type volcanoWebhook struct {
	path, name string
	mutating   bool
	group      string
	version    string
	resource   string
	operations []admissionv1.OperationType
}

var volcanoWebhooks = []volcanoWebhook{
	{"/jobs/mutate", "mutatejob.volcano.sh", true, "batch.volcano.sh", "v1alpha1", "jobs", ops(admissionv1.Create)},
	{"/jobs/validate", "validatejob.volcano.sh", false, "batch.volcano.sh", "v1alpha1", "jobs", ops(admissionv1.Create, admissionv1.Update)},
	{"/podgroups/mutate", "mutatepodgroup.volcano.sh", true, "scheduling.volcano.sh", "v1beta1", "podgroups", ops(admissionv1.Create)},
	{"/podgroups/validate", "validatepodgroup.volcano.sh", false, "scheduling.volcano.sh", "v1beta1", "podgroups", ops(admissionv1.Create)},
	{"/queues/mutate", "mutatequeue.volcano.sh", true, "scheduling.volcano.sh", "v1beta1", "queues", ops(admissionv1.Create)},
	{"/queues/validate", "validatequeue.volcano.sh", false, "scheduling.volcano.sh", "v1beta1", "queues", ops(admissionv1.Create, admissionv1.Update, admissionv1.Delete)},
	{"/hypernodes/validate", "validatehypernode.volcano.sh", false, "topology.volcano.sh", "v1alpha1", "hypernodes", ops(admissionv1.Create, admissionv1.Update)},
}

func ops(o ...admissionv1.OperationType) []admissionv1.OperationType { return o }

// volcanoSchedulerConf: Volcano's default actions and plugins plus network-topology-aware, as its
// network-topology guide configures it.
const volcanoSchedulerConf = `actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
  - name: network-topology-aware
`

// volcanoBinaries are the executables of e2e/bin/volcano.
var volcanoBinaries = []string{"vc-scheduler", "vc-controller-manager", "vc-webhook-manager"}

// volcanoOptions is what --volcano and --volcano-vap ask for.
type volcanoOptions struct {
	dir string // binaries, crd/*.yaml and policy/*.yaml
	vap bool   // also Volcano's ValidatingAdmissionPolicies
}

// checkVolcanoDir says what is missing from a --volcano-dir, in one line.
func checkVolcanoDir(dir string) error {
	for _, b := range volcanoBinaries {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return fmt.Errorf("%s: not found (make testcluster-volcano builds it)", filepath.Join(dir, b))
		}
	}
	crds, _ := filepath.Glob(filepath.Join(dir, "crd", "*.yaml"))
	if len(crds) == 0 {
		return fmt.Errorf("%s: no CRDs (make testcluster-volcano copies them)", filepath.Join(dir, "crd"))
	}
	return nil
}

// startVolcano installs Volcano's CRDs (and policies), registers its webhooks, starts its three
// components and returns once its scheduler has made the default Queue, the queue controller has
// opened it, and its webhooks mutate and validate a Job.
func (c *cluster) startVolcano(ctx context.Context, client *kubernetes.Clientset) error {
	dyn, err := c.dynamicClient()
	if err != nil {
		return err
	}
	paths, _ := filepath.Glob(filepath.Join(c.volcano.dir, "crd", "*.yaml"))
	crds, err := readCRDs(paths)
	if err != nil {
		return fmt.Errorf("CRDs: %v", err)
	}
	if err := applyCRDs(ctx, dyn, crds); err != nil {
		return err
	}
	if c.volcano.vap {
		policies, _ := filepath.Glob(filepath.Join(c.volcano.dir, "policy", "*-validating.yaml"))
		if len(policies) == 0 {
			return fmt.Errorf("--volcano-vap: no %s", filepath.Join(c.volcano.dir, "policy", "*-validating.yaml"))
		}
		if err := applyManifests(ctx, client.Discovery(), dyn, policies); err != nil {
			return fmt.Errorf("ValidatingAdmissionPolicies: %v", err)
		}
	}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: volcanoNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}

	ports, err := freePorts(6)
	if err != nil {
		return err
	}
	webhookPort := ports[0]
	if err := registerVolcanoWebhooks(ctx, client, webhookPort, c.pki.caCert); err != nil {
		return fmt.Errorf("webhook configurations: %v", err)
	}
	conf := filepath.Join(c.dir, "volcano-scheduler.conf")
	if err := os.WriteFile(conf, []byte(volcanoSchedulerConf), 0o644); err != nil {
		return err
	}
	loopback := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	common := []string{"--kubeconfig=" + c.kubeconfig, "--leader-elect=false", "--enable-healthz=true"}
	bin := func(name string) string { return filepath.Join(c.volcano.dir, name) }

	c.launchExec("vc-scheduler", bin("vc-scheduler"), append([]string{
		"--scheduler-conf=" + conf, "--healthz-address=" + loopback(ports[1]), "--listen-address=" + loopback(ports[2]),
		"--cache-dumper=false", "--schedule-period=1s",
	}, common...))
	c.launchExec("vc-controller-manager", bin("vc-controller-manager"), append([]string{
		"--controllers=" + volcanoControllers, "--healthz-address=" + loopback(ports[3]), "--listen-address=" + loopback(ports[4]),
	}, common...))
	// The serving certificate of the API server is a loopback certificate signed by the harness's
	// CA: the webhook server uses it too.
	c.launchExec("vc-webhook-manager", bin("vc-webhook-manager"), []string{
		"--kubeconfig=" + c.kubeconfig, "--enable-healthz=true", "--healthz-address=" + loopback(ports[5]),
		"--listen-address=127.0.0.1", "--port=" + strconv.Itoa(webhookPort),
		"--webhook-url=" + fmt.Sprintf("https://127.0.0.1:%d", webhookPort),
		"--tls-cert-file=" + c.pki.servingCert, "--tls-private-key-file=" + c.pki.servingKey,
		"--ca-cert-file=" + filepath.Join(c.pki.dir, "ca.crt"),
		"--enabled-admission=" + volcanoAdmissionPaths(),
	})

	for i, name := range volcanoBinaries[:2] {
		if err := c.waitHTTPHealthy(ctx, name, ports[2*i+1], 3*time.Minute); err != nil {
			return err
		}
	}
	// vc-webhook-manager serves /healthz over TLS, with its webhook certificate.
	if err := waitHealthy(ctx, "vc-webhook-manager", ports[5], 3*time.Minute); err != nil {
		return err
	}
	if err := waitDefaultQueueOpen(ctx, dyn, 3*time.Minute); err != nil {
		return err
	}
	return c.waitVolcanoAdmission(ctx, dyn, 3*time.Minute)
}

func volcanoAdmissionPaths() string {
	var paths []string
	for _, w := range volcanoWebhooks {
		paths = append(paths, w.path)
	}
	return strings.Join(paths, ",")
}

// registerVolcanoWebhooks creates the webhook configurations vc-webhook-manager expects (it only
// fills in their caBundle), each pointing at its path on loopback.
func registerVolcanoWebhooks(ctx context.Context, client kubernetes.Interface, port int, caBundle []byte) error {
	fail := admissionv1.Fail
	equivalent := admissionv1.Equivalent
	never := admissionv1.NeverReinvocationPolicy
	sideEffects := admissionv1.SideEffectClassNoneOnDryRun
	timeout := int32(10)
	nsSelector := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{volcanoNamespace, "kube-system"}}}}
	for _, w := range volcanoWebhooks {
		url := fmt.Sprintf("https://127.0.0.1:%d%s", port, w.path)
		cc := admissionv1.WebhookClientConfig{URL: &url, CABundle: caBundle}
		rules := []admissionv1.RuleWithOperations{{Operations: w.operations, Rule: admissionv1.Rule{
			APIGroups: []string{w.group}, APIVersions: []string{w.version}, Resources: []string{w.resource}}}}
		name := "volcano-admission-service" + strings.ReplaceAll(w.path, "/", "-")
		meta := metav1.ObjectMeta{Name: name}
		var err error
		if w.mutating {
			_, err = client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionv1.MutatingWebhookConfiguration{
				ObjectMeta: meta, Webhooks: []admissionv1.MutatingWebhook{{
					Name: w.name, ClientConfig: cc, Rules: rules, FailurePolicy: &fail, MatchPolicy: &equivalent,
					NamespaceSelector: nsSelector, ObjectSelector: &metav1.LabelSelector{}, SideEffects: &sideEffects,
					TimeoutSeconds: &timeout, AdmissionReviewVersions: []string{"v1"}, ReinvocationPolicy: &never,
				}}}, metav1.CreateOptions{})
		} else {
			_, err = client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionv1.ValidatingWebhookConfiguration{
				ObjectMeta: meta, Webhooks: []admissionv1.ValidatingWebhook{{
					Name: w.name, ClientConfig: cc, Rules: rules, FailurePolicy: &fail, MatchPolicy: &equivalent,
					NamespaceSelector: nsSelector, ObjectSelector: &metav1.LabelSelector{}, SideEffects: &sideEffects,
					TimeoutSeconds: &timeout, AdmissionReviewVersions: []string{"v1"},
				}}}, metav1.CreateOptions{})
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: %v", name, err)
		}
	}
	return nil
}

// readManifests splits YAML files into objects.
func readManifests(paths []string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			raw, err := reader.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %v", path, err)
			}
			var m map[string]interface{}
			if err := yaml.Unmarshal(raw, &m); err != nil {
				return nil, fmt.Errorf("%s: %v", path, err)
			}
			if len(m) == 0 {
				continue
			}
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
	return out, nil
}

// applyManifests server-side applies every object of the files (cluster-scoped objects, or
// namespaced ones in their own namespace).
func applyManifests(ctx context.Context, disc discovery.DiscoveryInterface, dyn dynamic.Interface, paths []string) error {
	objs, err := readManifests(paths)
	if err != nil {
		return err
	}
	groups, err := restmapper.GetAPIGroupResources(disc)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s %s: %v", gvk.Kind, obj.GetName(), err)
		}
		data, err := obj.MarshalJSON()
		if err != nil {
			return err
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
		}
		force := true
		if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data,
			metav1.PatchOptions{FieldManager: "testcluster", Force: &force}); err != nil {
			return fmt.Errorf("%s %s: %v", gvk.Kind, obj.GetName(), err)
		}
	}
	return nil
}

func (c *cluster) waitHTTPHealthy(ctx context.Context, name string, port int, timeout time.Duration) error {
	return waitURLHealthy(ctx, name, fmt.Sprintf("http://127.0.0.1:%d/healthz", port), timeout,
		func() error { return c.exited(name) })
}

// exited is an error once the named component has exited.
func (c *cluster) exited(name string) error {
	c.mu.Lock()
	p := c.components[name]
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (see %s.log)", name, name)
	default:
		return nil
	}
}

var queueResource = schema.GroupVersionResource{Group: "scheduling.volcano.sh", Version: "v1beta1", Resource: "queues"}

// waitDefaultQueueOpen: vc-scheduler creates the default Queue, the queue controller opens it,
// and Volcano's job webhook admits Jobs only into an open queue.
func waitDefaultQueueOpen(ctx context.Context, dyn dynamic.Interface, timeout time.Duration) error {
	err := poll(ctx, 200*time.Millisecond, timeout, func() (bool, error) {
		q, err := dyn.Resource(queueResource).Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		state, _, _ := unstructured.NestedString(q.Object, "status", "state")
		return state == "Open", fmt.Errorf("queue default: state %q", state)
	})
	if err != nil {
		return fmt.Errorf("volcano default queue: %v", err)
	}
	return nil
}

var jobResource = schema.GroupVersionResource{Group: "batch.volcano.sh", Version: "v1alpha1", Resource: "jobs"}

// probeJob is a Job with one unnamed task of `replicas` pods needing `minAvailable` of them.
func probeJob(replicas, minAvailable int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
		"metadata": map[string]interface{}{"name": "testcluster-probe", "namespace": "default"},
		"spec": map[string]interface{}{"tasks": []interface{}{map[string]interface{}{
			"replicas": replicas, "minAvailable": minAvailable,
			"template": map[string]interface{}{"spec": map[string]interface{}{
				"containers": []interface{}{map[string]interface{}{"name": "c", "image": "registry.example/probe:1"}}}},
		}}},
	}}
}

// waitVolcanoAdmission: the API server reaches Volcano's webhooks. A dry-run Job comes back
// mutated by /jobs/mutate (its unnamed task named default0), and one that asks for more pods than
// it has is denied by /jobs/validate.
func (c *cluster) waitVolcanoAdmission(ctx context.Context, dyn dynamic.Interface, timeout time.Duration) error {
	jobs := dyn.Resource(jobResource).Namespace("default")
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	err := poll(ctx, 500*time.Millisecond, timeout, func() (bool, error) {
		if err := c.exited("vc-webhook-manager"); err != nil {
			return false, err
		}
		got, err := jobs.Create(ctx, probeJob(1, 1), dry)
		if err != nil {
			return false, fmt.Errorf("/jobs/mutate: %v", err)
		}
		tasks, _, _ := unstructured.NestedSlice(got.Object, "spec", "tasks")
		if len(tasks) != 1 || tasks[0].(map[string]interface{})["name"] != "default0" {
			return false, fmt.Errorf("/jobs/mutate: the probe Job's task was not named default0: %v", tasks)
		}
		_, err = jobs.Create(ctx, probeJob(1, 2), dry)
		if err == nil || !strings.Contains(err.Error(), "'minAvailable' is greater than 'replicas'") {
			return false, fmt.Errorf("/jobs/validate: a task with minAvailable 2 of 1 replica was not denied: %v", err)
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("volcano webhooks: %v", err)
	}
	return nil
}
