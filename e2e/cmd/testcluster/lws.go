package main

// --lws: LeaderWorkerSet's manager (leaderworkerset.x-k8s.io/v1, sigs.k8s.io/lws v0.9.0: e2e/lws/go.mod says why
// not v0.10.0), from bin/lws/ (make testcluster-lws), run out of cluster against the harness's kubeconfig. Its CRDs
// (config/crd/bases: LeaderWorkerSet, and DisaggregatedSet, whose controller the manager always starts) are applied
// and Established before it starts. Its internal certificate manager is off (it would want a Secret and a Service
// of its in-cluster install and would write its own CA into the webhook configurations): its webhook server serves
// the harness's loopback serving certificate (IP SAN 127.0.0.1), and its webhooks, read from the module's
// config/webhook/manifests.yaml with its kustomize patches' objectSelector on the pod webhooks, are registered by URL
// with the harness CA under the names of its install (lws-mutating-webhook-configuration, lws-validating-...).
// They are part of how an LWS works: the defaulter writes rolloutStrategy (the controller dereferences it) and the
// pod webhook labels workers with their worker-index and leaders with their group-index and group-key (the worker
// StatefulSet's selector). --lws-gang volcano (needs --volcano) sets gangSchedulingManagement.schedulerProvider:
// volcano in its Configuration: one Volcano PodGroup per group, minMember = size, and every LWS pod names it
// (scheduling.k8s.io/group-name); pods still name schedulerName: volcano themselves. kube-controller-manager runs
// the StatefulSet controller (an LWS is a leader StatefulSet and one worker StatefulSet per group) in every harness.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
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
	lwsName = "lws"
	// lwsManifests is upstream's config/webhook/manifests.yaml, copied by make testcluster-lws.
	lwsManifests = "webhook/manifests.yaml"
	// lwsPodsLabel is the label upstream's webhook patches select the pods of its pod webhooks by.
	lwsPodsLabel = "leaderworkerset.sigs.k8s.io/name"
)

// lwsGangs are the values of --lws-gang: LWS's gang scheduling provider (volcano is the only one it has).
var lwsGangs = []string{"none", "volcano"}

var lwsResource = schema.GroupVersionResource{Group: "leaderworkerset.x-k8s.io", Version: "v1", Resource: "leaderworkersets"}

// lwsFlags checks --lws and --lws-gang and finds what --lws runs.
func lwsFlags(o options, out *operatorOptions) error {
	if o.lwsGang != "" && !o.lws {
		return fmt.Errorf("--lws-gang needs --lws; %s", usage)
	}
	out.lwsGang = o.lwsGang
	if out.lwsGang == "" {
		out.lwsGang = "none"
	}
	if !contains(lwsGangs, out.lwsGang) {
		return fmt.Errorf("--lws-gang %q: must be one of %s", out.lwsGang, strings.Join(lwsGangs, ", "))
	}
	if out.lwsGang == "volcano" && !o.volcano {
		return fmt.Errorf("--lws-gang volcano needs --volcano (LWS creates Volcano PodGroups)")
	}
	if !o.lws {
		return nil
	}
	comp, err := findComponent(lwsName, "lws-manager")
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(comp.dir, lwsManifests)); err != nil {
		return fmt.Errorf("--lws: %s: no webhook manifests (make testcluster-lws copies them)",
			filepath.Join(comp.dir, lwsManifests))
	}
	out.lws = comp
	return nil
}

// startLWS runs LWS's manager with its Configuration file (config.lws.x-k8s.io/v1alpha1): no leader election, no
// internal certificate management, its webhook server on a free loopback port with the harness's serving
// certificate, no metrics server, its health probes on another free port. It is ready once /readyz answers, its
// webhook port answers TLS with the harness CA, and a dry-run LWS without rolloutStrategy comes back defaulted by
// its webhook through the API server.
func (c *cluster) startLWS(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface) error {
	o := c.operators
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	webhookPort, healthPort := ports[0], ports[1]
	certs := filepath.Join(c.dir, lwsName+"-certs")
	if err := copyServingCert(c.pki, certs); err != nil {
		return err
	}
	config := map[string]interface{}{
		"apiVersion":             "config.lws.x-k8s.io/v1alpha1",
		"kind":                   "Configuration",
		"leaderElection":         map[string]interface{}{"leaderElect": false},
		"internalCertManagement": map[string]interface{}{"enable": false},
		"webhook":                map[string]interface{}{"port": webhookPort, "host": "127.0.0.1", "certDir": certs},
		"metrics":                map[string]interface{}{"bindAddress": "0"},
		"health":                 map[string]interface{}{"healthProbeBindAddress": "127.0.0.1:" + strconv.Itoa(healthPort)},
	}
	if o.lwsGang == "volcano" {
		config["gangSchedulingManagement"] = map[string]interface{}{"schedulerProvider": "volcano"}
	}
	path, err := c.writeYAML(lwsName+"-config.yaml", config)
	if err != nil {
		return err
	}
	c.launchEnv(lwsName, o.lws.bin, []string{"--config=" + path, "--kubeconfig=" + c.kubeconfig,
		"--kube-api-qps=100", "--kube-api-burst=200"})
	mutating, validating, err := lwsWebhooks(filepath.Join(o.lws.dir, lwsManifests), webhookPort, c.pki.caCert)
	if err != nil {
		return err
	}
	if err := registerLWSWebhooks(ctx, client, mutating, validating); err != nil {
		return err
	}
	alive := func() error { return c.exited(lwsName) }
	if err := waitURLHealthy(ctx, lwsName, fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort), 3*time.Minute,
		alive); err != nil {
		return err
	}
	if err := waitTLS(ctx, webhookPort, c.pki.caCert, 2*time.Minute, alive); err != nil {
		return fmt.Errorf("webhook server: %v", err)
	}
	return c.waitLWSAdmission(ctx, dyn, 2*time.Minute)
}

// lwsWebhooks reads upstream's webhook manifests (one MutatingWebhookConfiguration, one
// ValidatingWebhookConfiguration) and points every webhook at https://127.0.0.1:PORT<its path> with caBundle; the
// pod webhooks get the objectSelector of upstream's mutating-patch.yaml and validating-patch.yaml (only the pods of
// an LWS), as its kustomize install has them.
func lwsWebhooks(manifests string, port int, caBundle []byte) (*admissionv1.MutatingWebhookConfiguration,
	*admissionv1.ValidatingWebhookConfiguration, error) {
	data, err := os.ReadFile(manifests)
	if err != nil {
		return nil, nil, err
	}
	var mutating *admissionv1.MutatingWebhookConfiguration
	var validating *admissionv1.ValidatingWebhookConfiguration
	for _, doc := range bytes.Split(data, []byte("\n---")) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, nil, fmt.Errorf("%s: %v", manifests, err)
		}
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			mutating = &admissionv1.MutatingWebhookConfiguration{}
			err = yaml.UnmarshalStrict(doc, mutating)
		case "ValidatingWebhookConfiguration":
			validating = &admissionv1.ValidatingWebhookConfiguration{}
			err = yaml.UnmarshalStrict(doc, validating)
		case "":
			continue
		default:
			err = fmt.Errorf("unexpected kind %q", meta.Kind)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %v", manifests, err)
		}
	}
	if mutating == nil || validating == nil {
		return nil, nil, fmt.Errorf("%s: want one MutatingWebhookConfiguration and one ValidatingWebhookConfiguration", manifests)
	}
	lwsPods := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: lwsPodsLabel, Operator: metav1.LabelSelectorOpExists}}}
	clientConfig := func(name string, cc admissionv1.WebhookClientConfig) (admissionv1.WebhookClientConfig, error) {
		if cc.Service == nil || cc.Service.Path == nil {
			return cc, fmt.Errorf("%s: webhook %s has no service path", manifests, name)
		}
		url := fmt.Sprintf("https://127.0.0.1:%d%s", port, *cc.Service.Path)
		return admissionv1.WebhookClientConfig{URL: &url, CABundle: caBundle}, nil
	}
	mutating.ObjectMeta = metav1.ObjectMeta{Name: "lws-mutating-webhook-configuration"}
	for i := range mutating.Webhooks {
		w := &mutating.Webhooks[i]
		if w.ClientConfig, err = clientConfig(w.Name, w.ClientConfig); err != nil {
			return nil, nil, err
		}
		if rulesCoverPods(w.Rules) {
			w.ObjectSelector = lwsPods
		}
	}
	validating.ObjectMeta = metav1.ObjectMeta{Name: "lws-validating-webhook-configuration"}
	for i := range validating.Webhooks {
		w := &validating.Webhooks[i]
		if w.ClientConfig, err = clientConfig(w.Name, w.ClientConfig); err != nil {
			return nil, nil, err
		}
		if rulesCoverPods(w.Rules) {
			w.ObjectSelector = lwsPods
		}
	}
	return mutating, validating, nil
}

// rulesCoverPods: a webhook of core pods (upstream's mpod.kb.io and vpod.kb.io).
func rulesCoverPods(rules []admissionv1.RuleWithOperations) bool {
	for _, r := range rules {
		if contains(r.APIGroups, "") && contains(r.Resources, "pods") {
			return true
		}
	}
	return false
}

// registerLWSWebhooks creates both configurations, or points them at this start's port and CA when they exist
// (a start that tried again with other ports, in the same etcd, registered the first port).
func registerLWSWebhooks(ctx context.Context, client kubernetes.Interface,
	mutating *admissionv1.MutatingWebhookConfiguration, validating *admissionv1.ValidatingWebhookConfiguration) error {
	mutations := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	_, err := mutations.Create(ctx, mutating, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var got *admissionv1.MutatingWebhookConfiguration
		if got, err = mutations.Get(ctx, mutating.Name, metav1.GetOptions{}); err == nil {
			got.Webhooks = mutating.Webhooks
			_, err = mutations.Update(ctx, got, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("mutating webhooks: %v", err)
	}
	validations := client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	_, err = validations.Create(ctx, validating, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var got *admissionv1.ValidatingWebhookConfiguration
		if got, err = validations.Get(ctx, validating.Name, metav1.GetOptions{}); err == nil {
			got.Webhooks = validating.Webhooks
			_, err = validations.Update(ctx, got, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("validating webhooks: %v", err)
	}
	return nil
}

// waitTLS polls until 127.0.0.1:port completes a TLS handshake whose certificate the harness CA verifies for
// 127.0.0.1 (what the API server checks when it calls the webhook).
func waitTLS(ctx context.Context, port int, caCert []byte, timeout time.Duration, alive func() error) error {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caCert) {
		return fmt.Errorf("the harness CA has no certificate")
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
	return poll(ctx, 200*time.Millisecond, timeout, func() (bool, error) {
		if err := alive(); err != nil {
			return false, err
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			return false, err
		}
		return true, conn.Close()
	})
}

// waitLWSAdmission: a dry-run LWS without rolloutStrategy comes back with rolloutStrategy.rollingUpdateConfiguration
// written (the CRD has no default for it; LWS's defaulter writes maxUnavailable 1): LWS's webhook answers through
// the API server.
func (c *cluster) waitLWSAdmission(ctx context.Context, dyn dynamic.Interface, timeout time.Duration) error {
	lws := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
		"metadata": map[string]interface{}{"name": "testcluster-probe", "namespace": "default"},
		"spec": map[string]interface{}{"leaderWorkerTemplate": map[string]interface{}{
			"size": int64(2), "workerTemplate": map[string]interface{}{"spec": map[string]interface{}{
				"containers": []interface{}{map[string]interface{}{"name": "probe", "image": "registry.example/probe:1"}}}}}},
	}}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	err := poll(ctx, 500*time.Millisecond, timeout, func() (bool, error) {
		if err := c.exited(lwsName); err != nil {
			return false, err
		}
		got, err := dyn.Resource(lwsResource).Namespace("default").Create(ctx, lws, dry)
		if err != nil {
			return false, err
		}
		if _, found, _ := unstructured.NestedMap(got.Object, "spec", "rolloutStrategy", "rollingUpdateConfiguration"); found {
			return true, nil
		}
		return false, fmt.Errorf("a dry-run LeaderWorkerSet came back without spec.rolloutStrategy.rollingUpdateConfiguration")
	})
	if err != nil {
		return fmt.Errorf("webhook: %v", err)
	}
	return nil
}
