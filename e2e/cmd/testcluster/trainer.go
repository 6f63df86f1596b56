package main

// --jobset and --trainer: JobSet's controller (jobset.x-k8s.io/v1alpha2) and Kubeflow Trainer v2's controller
// manager (trainer.kubeflow.org/v1alpha1 TrainJob, TrainingRuntime, ClusterTrainingRuntime; Trainer makes one
// JobSet per TrainJob, so --trainer implies --jobset), both from bin/trainer/ (make testcluster-trainer), run out
// of cluster against the harness's kubeconfig. Their certificate rotators are off (each would want a Secret and a
// Service of its in-cluster install): their webhook servers serve the harness's loopback serving certificate, and
// their webhooks (upstream's names, paths and rules: jobset config/components/webhook/manifests.yaml, trainer
// manifests/base/webhook/manifests.yaml) are registered by URL with the harness CA. JobSet's webhooks are part of
// how JobSets work (its defaulter makes Jobs Indexed and pods restartPolicy OnFailure; its pod webhooks place
// exclusive-topology pods), Trainer's defaulter stamps each runtimePatch's time and its validators refuse a changed
// runtimePatch of a running TrainJob. Both start after the PodGroup CRDs of --coscheduling and --volcano are
// established: Trainer watches the PodGroups of a scheduler only when their CRD is served at its start.
// kube-controller-manager runs the Job controller with --jobset (a JobSet is Jobs).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

const (
	jobsetName  = "jobset"
	trainerName = "trainer"
	// trainerDir is the directory of bin/ both are built into (make testcluster-trainer).
	trainerDir = "trainer"
	// jobsetCRD is JobSet's CRD among bin/trainer/crd/*.yaml; the others are Trainer's.
	jobsetCRD = "jobset.x-k8s.io_jobsets.yaml"
)

var (
	jobSetResource   = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}
	trainJobResource = schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainjobs"}
)

// trainerFlags finds the binaries --jobset and --trainer run (--trainer implies --jobset).
func trainerFlags(o options, out *operatorOptions) error {
	var err error
	if o.jobset && !o.trainer {
		if out.jobset, err = findComponent(trainerDir, jobsetName); err != nil {
			return fmt.Errorf("--jobset: %s", strings.TrimPrefix(err.Error(), "--"+trainerDir+": "))
		}
	}
	if o.trainer {
		if out.jobset, err = findComponent(trainerDir, jobsetName); err != nil {
			return err
		}
	}
	if o.trainer {
		if out.trainer, err = findComponent(trainerDir, "trainer-controller-manager"); err != nil {
			return err
		}
	}
	return nil
}

// trainerCRDs: JobSet's CRD with --jobset, and Trainer's three with --trainer.
func (o *operatorOptions) trainerCRDs() ([]*unstructured.Unstructured, error) {
	if o.jobset == nil {
		return nil, nil
	}
	paths := []string{filepath.Join(o.jobset.dir, "crd", jobsetCRD)}
	if o.trainer != nil {
		for _, n := range []string{"trainjobs", "trainingruntimes", "clustertrainingruntimes"} {
			paths = append(paths, filepath.Join(o.trainer.dir, "crd", "trainer.kubeflow.org_"+n+".yaml"))
		}
	}
	crds, err := readCRDs(paths)
	if err != nil {
		return nil, fmt.Errorf("%s CRDs: %v", trainerDir, err)
	}
	return crds, nil
}

// startTrainerControllers starts JobSet's controller, then Trainer's, each ready once its /readyz answers and its
// webhooks admit an object through the API server.
func (c *cluster) startTrainerControllers(ctx context.Context, client *kubernetes.Clientset, dyn dynamic.Interface) error {
	o := c.operators
	if o.jobset == nil {
		return nil
	}
	if err := c.startJobSet(ctx, client, dyn); err != nil {
		return fmt.Errorf("%s: %v", jobsetName, err)
	}
	if o.trainer != nil {
		if err := c.startTrainer(ctx, client, dyn); err != nil {
			return fmt.Errorf("%s: %v", trainerName, err)
		}
	}
	return nil
}

// writeYAML writes obj as YAML to DIR/name.
func (c *cluster) writeYAML(name string, obj interface{}) (string, error) {
	out, err := yaml.Marshal(obj)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.dir, name)
	return path, os.WriteFile(path, out, 0o644)
}

// startJobSet runs JobSet's controller with its Configuration file (config.jobset.x-k8s.io/v1alpha1): no leader
// election (the configuration's default turns it on whatever the flag says), no internal certificate management,
// its webhook server on a free loopback port with the harness's serving certificate, no metrics server.
func (c *cluster) startJobSet(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	webhookPort, healthPort := ports[0], ports[1]
	certs := filepath.Join(c.dir, jobsetName+"-certs")
	if err := copyServingCert(c.pki, certs); err != nil {
		return err
	}
	config, err := c.writeYAML(jobsetName+"-config.yaml", map[string]interface{}{
		"apiVersion":             "config.jobset.x-k8s.io/v1alpha1",
		"kind":                   "Configuration",
		"leaderElection":         map[string]interface{}{"leaderElect": false},
		"internalCertManagement": map[string]interface{}{"enable": false},
		"webhook":                map[string]interface{}{"port": webhookPort, "host": "127.0.0.1", "certDir": certs},
		"metrics":                map[string]interface{}{"bindAddress": "0"},
		"health":                 map[string]interface{}{"healthProbeBindAddress": "127.0.0.1:" + strconv.Itoa(healthPort)},
	})
	if err != nil {
		return err
	}
	c.launchEnv(jobsetName, c.operators.jobset.bin, []string{"--config=" + config, "--kube-api-qps=100",
		"--kube-api-burst=200"}, "KUBECONFIG="+c.kubeconfig)
	if err := registerJobSetWebhooks(ctx, client, webhookPort, c.pki.caCert); err != nil {
		return err
	}
	if err := waitURLHealthy(ctx, jobsetName, fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort), 3*time.Minute,
		func() error { return c.exited(jobsetName) }); err != nil {
		return err
	}
	return c.waitJobSetAdmission(ctx, dyn, 2*time.Minute)
}

// webhookRule is one rule of one resource for CREATE (and UPDATE when update).
func webhookRule(group, version, resource string, update bool) []admissionv1.RuleWithOperations {
	ops := []admissionv1.OperationType{admissionv1.Create}
	if update {
		ops = append(ops, admissionv1.Update)
	}
	return []admissionv1.RuleWithOperations{{Operations: ops,
		Rule: admissionv1.Rule{APIGroups: []string{group}, APIVersions: []string{version}, Resources: []string{resource}}}}
}

// registerWebhooks creates one mutating and one validating configuration named name (what is there already is
// kept: a restart of the same directory registers the same URLs' shape again only when absent).
func registerWebhooks(ctx context.Context, client kubernetes.Interface, name string,
	mutating []admissionv1.MutatingWebhook, validating []admissionv1.ValidatingWebhook) error {
	_, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx,
		&admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: mutating},
		metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("mutating webhooks: %v", err)
	}
	_, err = client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx,
		&admissionv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: validating},
		metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("validating webhooks: %v", err)
	}
	return nil
}

// registerJobSetWebhooks: JobSet's four webhooks (its defaulter for CREATE, its validator for CREATE and UPDATE,
// and the pod defaulter and validator of exclusive placement, which see only pods of a JobSet: upstream's
// objectSelector on the jobset-name label).
func registerJobSetWebhooks(ctx context.Context, client kubernetes.Interface, port int, caBundle []byte) error {
	fail := admissionv1.Fail
	none := admissionv1.SideEffectClassNone
	config := func(path string) admissionv1.WebhookClientConfig {
		url := fmt.Sprintf("https://127.0.0.1:%d/%s", port, path)
		return admissionv1.WebhookClientConfig{URL: &url, CABundle: caBundle}
	}
	jobsetPods := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "jobset.sigs.k8s.io/jobset-name", Operator: metav1.LabelSelectorOpExists}}}
	mutating := []admissionv1.MutatingWebhook{
		{Name: "mjobset.kb.io", ClientConfig: config("mutate-jobset-x-k8s-io-v1alpha2-jobset"),
			Rules: webhookRule("jobset.x-k8s.io", "v1alpha2", "jobsets", false)},
		{Name: "mpod.kb.io", ClientConfig: config("mutate--v1-pod"), Rules: webhookRule("", "v1", "pods", false),
			ObjectSelector: jobsetPods},
	}
	validating := []admissionv1.ValidatingWebhook{
		{Name: "vjobset.kb.io", ClientConfig: config("validate-jobset-x-k8s-io-v1alpha2-jobset"),
			Rules: webhookRule("jobset.x-k8s.io", "v1alpha2", "jobsets", true)},
		{Name: "vpod.kb.io", ClientConfig: config("validate--v1-pod"), Rules: webhookRule("", "v1", "pods", false),
			ObjectSelector: jobsetPods},
	}
	for i := range mutating {
		mutating[i].FailurePolicy, mutating[i].SideEffects = &fail, &none
		mutating[i].AdmissionReviewVersions = []string{"v1"}
	}
	for i := range validating {
		validating[i].FailurePolicy, validating[i].SideEffects = &fail, &none
		validating[i].AdmissionReviewVersions = []string{"v1"}
	}
	return registerWebhooks(ctx, client, "testcluster-jobset", mutating, validating)
}

// waitJobSetAdmission: a dry-run JobSet whose pod template has no restartPolicy comes back with JobSet's default,
// OnFailure (API defaulting alone gives Always, which a Job refuses): JobSet's defaulter answers through the API
// server.
func (c *cluster) waitJobSetAdmission(ctx context.Context, dyn dynamic.Interface, timeout time.Duration) error {
	js := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
		"metadata": map[string]interface{}{"name": "testcluster-probe", "namespace": "default"},
		"spec": map[string]interface{}{"replicatedJobs": []interface{}{map[string]interface{}{
			"name": "probe", "replicas": int64(1), "template": map[string]interface{}{"spec": map[string]interface{}{
				"template": map[string]interface{}{"spec": map[string]interface{}{"containers": []interface{}{
					map[string]interface{}{"name": "probe", "image": "registry.example/probe:1"}}}}}}}}},
	}}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	err := poll(ctx, 500*time.Millisecond, timeout, func() (bool, error) {
		if err := c.exited(jobsetName); err != nil {
			return false, err
		}
		got, err := dyn.Resource(jobSetResource).Namespace("default").Create(ctx, js, dry)
		if err != nil {
			return false, err
		}
		jobs, _, _ := unstructured.NestedSlice(got.Object, "spec", "replicatedJobs")
		if len(jobs) == 1 {
			policy, _, _ := unstructured.NestedString(jobs[0].(map[string]interface{}),
				"template", "spec", "template", "spec", "restartPolicy")
			if policy == "OnFailure" {
				return true, nil
			}
			return false, fmt.Errorf("a dry-run JobSet's pod template has restartPolicy %q, not JobSet's default OnFailure", policy)
		}
		return false, fmt.Errorf("a dry-run JobSet came back with %d replicated jobs", len(jobs))
	})
	if err != nil {
		return fmt.Errorf("webhook: %v", err)
	}
	return nil
}

// startTrainer runs Trainer's controller manager with its Configuration file (config.trainer.kubeflow.org/
// v1alpha1): certificate management off (its rotator wants Secret kubeflow-trainer-webhook-cert and rewrites the
// caBundle of its own configurations), no leader election (none without a leaderElection section), its webhook
// server on a free loopback port reading $TMPDIR/k8s-webhook-server/serving-certs (controller-runtime's default
// directory: Trainer sets none), no metrics server.
func (c *cluster) startTrainer(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	webhookPort, healthPort := ports[0], ports[1]
	tmp := filepath.Join(c.dir, trainerName+"-tmp")
	if err := copyServingCert(c.pki, filepath.Join(tmp, "k8s-webhook-server", "serving-certs")); err != nil {
		return err
	}
	config, err := c.writeYAML(trainerName+"-config.yaml", map[string]interface{}{
		"apiVersion":     "config.trainer.kubeflow.org/v1alpha1",
		"kind":           "Configuration",
		"health":         map[string]interface{}{"healthProbeBindAddress": "127.0.0.1:" + strconv.Itoa(healthPort)},
		"metrics":        map[string]interface{}{"bindAddress": "0"},
		"webhook":        map[string]interface{}{"port": webhookPort, "host": "127.0.0.1"},
		"certManagement": map[string]interface{}{"enable": false},
	})
	if err != nil {
		return err
	}
	c.launchEnv(trainerName, c.operators.trainer.bin, []string{"--config=" + config},
		"KUBECONFIG="+c.kubeconfig, "TMPDIR="+tmp)
	if err := registerTrainerWebhooks(ctx, client, webhookPort, c.pki.caCert); err != nil {
		return err
	}
	if err := waitURLHealthy(ctx, trainerName, fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort), 3*time.Minute,
		func() error { return c.exited(trainerName) }); err != nil {
		return err
	}
	return c.waitTrainerAdmission(ctx, dyn, 2*time.Minute)
}

// registerTrainerWebhooks: Trainer's TrainJob defaulter (CREATE, UPDATE) and its validators of TrainJobs,
// TrainingRuntimes and ClusterTrainingRuntimes (CREATE, UPDATE).
func registerTrainerWebhooks(ctx context.Context, client kubernetes.Interface, port int, caBundle []byte) error {
	fail := admissionv1.Fail
	none := admissionv1.SideEffectClassNone
	config := func(verb, kind string) admissionv1.WebhookClientConfig {
		url := fmt.Sprintf("https://127.0.0.1:%d/%s-trainer-kubeflow-org-v1alpha1-%s", port, verb, kind)
		return admissionv1.WebhookClientConfig{URL: &url, CABundle: caBundle}
	}
	mutating := []admissionv1.MutatingWebhook{{
		Name: "defaulter.trainjob.trainer.kubeflow.org", ClientConfig: config("mutate", "trainjob"),
		Rules:         webhookRule("trainer.kubeflow.org", "v1alpha1", "trainjobs", true),
		FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
	}}
	var validating []admissionv1.ValidatingWebhook
	for _, kind := range []string{"trainjob", "trainingruntime", "clustertrainingruntime"} {
		validating = append(validating, admissionv1.ValidatingWebhook{
			Name: "validator." + kind + ".trainer.kubeflow.org", ClientConfig: config("validate", kind),
			Rules:         webhookRule("trainer.kubeflow.org", "v1alpha1", kind+"s", true),
			FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
		})
	}
	return registerWebhooks(ctx, client, "testcluster-trainer", mutating, validating)
}

// waitTrainerAdmission: a dry-run TrainJob naming a ClusterTrainingRuntime that does not exist is denied by
// Trainer's TrainJob validator (pkg/runtime/core: "specified clusterTrainingRuntime must be created before the
// TrainJob is created"), after its defaulter: both answer through the API server, and the validator reads
// through the manager's cache, so its informers run.
func (c *cluster) waitTrainerAdmission(ctx context.Context, dyn dynamic.Interface, timeout time.Duration) error {
	job := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
		"metadata": map[string]interface{}{"name": "testcluster-probe", "namespace": "default"},
		"spec": map[string]interface{}{"runtimeRef": map[string]interface{}{
			"name": "testcluster-probe-absent", "apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime"}},
	}}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	err := poll(ctx, 500*time.Millisecond, timeout, func() (bool, error) {
		if err := c.exited(trainerName); err != nil {
			return false, err
		}
		_, err := dyn.Resource(trainJobResource).Namespace("default").Create(ctx, job, dry)
		if err != nil && strings.Contains(err.Error(), `"validator.trainjob.trainer.kubeflow.org" denied`) &&
			strings.Contains(err.Error(), "must be created before the TrainJob is created") {
			return true, nil
		}
		return false, fmt.Errorf("a TrainJob of an absent ClusterTrainingRuntime was not denied by its validator: %v", err)
	})
	if err != nil {
		return fmt.Errorf("webhook: %v", err)
	}
	return nil
}
