package main

// --coscheduling: a second scheduler, kube-scheduler with the scheduler-plugins (built by `make
// testcluster-coscheduling` from sigs.k8s.io/scheduler-plugins into bin/ beside this binary), whose
// one profile, scheduler-plugins-scheduler, runs the Coscheduling plugin as scheduler-plugins
// documents it (manifests/coscheduling/scheduler-config.yaml and pkg/coscheduling/README.md).
//
// --crd FILE (repeatable): CustomResourceDefinitions applied, and waited for until Established,
// after the API server is ready and before the extra components start and `ready` is printed.
// The Coscheduling plugin watches PodGroups (scheduling.x-k8s.io) from its start, so
// --coscheduling needs that CRD among them.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

const (
	// coschedulingBinary is the scheduler `make testcluster-coscheduling` builds beside testcluster.
	coschedulingBinary = "scheduler-plugins-scheduler"
	// coschedulingSchedulerName is the profile pods name in spec.schedulerName to be gang-scheduled.
	coschedulingSchedulerName = "scheduler-plugins-scheduler"
	// podGroupCRD is the CRD the Coscheduling plugin reads PodGroups from.
	podGroupCRD = "podgroups.scheduling.x-k8s.io"
	// permitWaitingTimeSeconds is upstream's sample value: how long a gang's pods wait at Permit
	// when their PodGroup sets no scheduleTimeoutSeconds.
	permitWaitingTimeSeconds = 10
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// crdFiles is the repeatable --crd flag.
type crdFiles []string

func (f *crdFiles) String() string { return fmt.Sprint(*f) }
func (f *crdFiles) Set(v string) error {
	*f = append(*f, v)
	return nil
}

// readCRDs reads every CustomResourceDefinition document of the --crd files; anything else in
// them, or a file without one, is an error naming the file and document.
func readCRDs(paths []string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, path := range paths {
		objs, err := readManifests([]string{path})
		if err != nil {
			return nil, err
		}
		if len(objs) == 0 {
			return nil, fmt.Errorf("%s: no CustomResourceDefinition in it", path)
		}
		for i, u := range objs {
			if u.GetAPIVersion() != "apiextensions.k8s.io/v1" || u.GetKind() != "CustomResourceDefinition" {
				return nil, fmt.Errorf("%s: document %d: must be an apiextensions.k8s.io/v1 CustomResourceDefinition, got %s %s",
					path, i+1, u.GetAPIVersion(), u.GetKind())
			}
			if u.GetName() == "" {
				return nil, fmt.Errorf("%s: document %d: metadata.name: required", path, i+1)
			}
		}
		out = append(out, objs...)
	}
	return out, nil
}

func hasCRD(crds []*unstructured.Unstructured, name string) bool {
	for _, c := range crds {
		if c.GetName() == name {
			return true
		}
	}
	return false
}

// checkCoscheduling finds the scheduler-plugins scheduler in the bin directory (binRoot) and checks the
// PodGroup CRD is among the --crd files; it returns the scheduler's path.
func checkCoscheduling(crds []*unstructured.Unstructured) (string, error) {
	root, err := binRoot()
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, coschedulingBinary)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("--coscheduling: %s: not built (make testcluster-coscheduling)", path)
	}
	if !hasCRD(crds, podGroupCRD) {
		return "", fmt.Errorf("--coscheduling: the Coscheduling plugin watches %s: pass its CRD with --crd FILE "+
			"(scheduler-plugins' config/crd/bases/scheduling.x-k8s.io_podgroups.yaml)", podGroupCRD)
	}
	return path, nil
}

// installCRDs applies the --crd CRDs server-side and waits until each is Established.
func (c *cluster) installCRDs(ctx context.Context) error {
	if len(c.crds) == 0 {
		return nil
	}
	client, err := c.dynamicClient()
	if err != nil {
		return err
	}
	return applyCRDs(ctx, client, c.crds)
}

// applyCRDs applies CRDs server-side and waits until each is Established.
func applyCRDs(ctx context.Context, client dynamic.Interface, objs []*unstructured.Unstructured) error {
	crds := client.Resource(crdResource)
	for _, crd := range objs {
		body, err := crd.MarshalJSON()
		if err != nil {
			return err
		}
		force := true
		if _, err := crds.Patch(ctx, crd.GetName(), types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: "testcluster", Force: &force}); err != nil {
			return fmt.Errorf("CRD %s: %v", crd.GetName(), err)
		}
	}
	for _, crd := range objs {
		name := crd.GetName()
		err := poll(ctx, 200*time.Millisecond, time.Minute, func() (bool, error) {
			got, err := crds.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return isEstablished(got), nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not Established: %v", name, err)
		}
	}
	return nil
}

func isEstablished(crd *unstructured.Unstructured) bool {
	conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conditions {
		m, _ := c.(map[string]interface{})
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// coschedulingConfig is the KubeSchedulerConfiguration of the second scheduler: one profile named
// scheduler-plugins-scheduler with Coscheduling at every extension point it implements and as the
// only queue sort, as upstream's manifests/coscheduling/scheduler-config.yaml has it.
func (c *cluster) coschedulingConfig() map[string]interface{} {
	return c.kubeSchedulerConfig(map[string]interface{}{
		"schedulerName": coschedulingSchedulerName,
		"plugins": map[string]interface{}{
			"multiPoint": map[string]interface{}{"enabled": []interface{}{map[string]interface{}{"name": "Coscheduling"}}},
			"queueSort": map[string]interface{}{
				"enabled":  []interface{}{map[string]interface{}{"name": "Coscheduling"}},
				"disabled": []interface{}{map[string]interface{}{"name": "*"}},
			},
		},
		"pluginConfig": []interface{}{map[string]interface{}{
			"name": "Coscheduling",
			"args": map[string]interface{}{"permitWaitingTimeSeconds": permitWaitingTimeSeconds},
		}},
	})
}

// startCoscheduling writes the config and starts the scheduler-plugins scheduler as a child
// process (log DIR/scheduler-plugins-scheduler.log); it returns its secure port for /healthz.
func (c *cluster) startCoscheduling() (int, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	out, err := yaml.Marshal(c.coschedulingConfig())
	if err != nil {
		return 0, err
	}
	path := filepath.Join(c.dir, coschedulingBinary+"-config.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return 0, err
	}
	c.launchExec(coschedulingBinary, c.coschedulingPath, []string{
		"--config=" + path, "--secure-port=" + strconv.Itoa(ports[0]), "--bind-address=127.0.0.1",
		"--authentication-kubeconfig=" + c.kubeconfig, "--authorization-kubeconfig=" + c.kubeconfig,
		"--profiling=false", "--v=3",
	})
	return ports[0], nil
}
