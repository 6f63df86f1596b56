package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Labels every fake Node carries, as a kubelet would set them.
const hostnameLabel = "kubernetes.io/hostname"

// defaultAllocatable is what a Node without status.allocatable (or capacity) offers.
var defaultAllocatable = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("32"),
	corev1.ResourceMemory: resource.MustParse("256Gi"),
	corev1.ResourcePods:   resource.MustParse("110"),
}

// defaultNodes: three nodes, one per zone, when no --nodes file is given.
func defaultNodes() []corev1.Node {
	var out []corev1.Node
	for _, z := range []string{"a", "b", "c"} {
		out = append(out, corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:   "node-" + z,
			Labels: map[string]string{"topology.kubernetes.io/zone": "zone-" + z},
		}})
	}
	return completeNodes(out)
}

// document is one YAML document of a nodes file: a Node, or a List/NodeList of them.
type document struct {
	Kind  string                   `json:"kind"`
	Items []map[string]interface{} `json:"items"`
}

// readNodes reads Node objects from a YAML or JSON stream: Node documents, or List/NodeList
// documents whose items are Nodes (what `kubectl get nodes -o yaml` prints).
func readNodes(path string) ([]corev1.Node, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var nodes []corev1.Node
	for doc := 1; ; doc++ {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %v", doc, err)
		}
		if len(bytes.TrimSpace(stripComments(raw))) == 0 {
			continue
		}
		var d document
		if err := yaml.Unmarshal(raw, &d); err != nil {
			return nil, fmt.Errorf("document %d: %v", doc, err)
		}
		switch d.Kind {
		case "Node":
			n, err := decodeNode(raw)
			if err != nil {
				return nil, fmt.Errorf("document %d: %v", doc, err)
			}
			nodes = append(nodes, n)
		case "List", "NodeList":
			for i, item := range d.Items {
				b, _ := yaml.Marshal(item)
				if k, _ := item["kind"].(string); k != "" && k != "Node" {
					return nil, fmt.Errorf("document %d: items[%d].kind: must be Node, got %q", doc, i, k)
				}
				n, err := decodeNode(b)
				if err != nil {
					return nil, fmt.Errorf("document %d: items[%d]: %v", doc, i, err)
				}
				nodes = append(nodes, n)
			}
		case "":
			return nil, fmt.Errorf("document %d: kind: required (Node, NodeList or List)", doc)
		default:
			return nil, fmt.Errorf("document %d: kind: must be Node, NodeList or List, got %q", doc, d.Kind)
		}
	}
	if len(nodes) == 0 {
		return nil, errors.New("no Node in the file")
	}
	if err := validateNodes(nodes); err != nil {
		return nil, err
	}
	return completeNodes(nodes), nil
}

func stripComments(b []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' && string(t) != "---" {
			out = append(out, line)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// decodeNode decodes one Node strictly: unknown fields and malformed quantities are errors.
func decodeNode(raw []byte) (corev1.Node, error) {
	var n corev1.Node
	if err := checkQuantities(raw); err != nil {
		return n, err
	}
	if err := yaml.UnmarshalStrict(raw, &n); err != nil {
		return n, errors.New(strings.TrimPrefix(err.Error(), "error unmarshaling JSON: while decoding JSON: "))
	}
	return n, nil
}

func validateNodes(nodes []corev1.Node) error {
	seen := map[string]bool{}
	for i, n := range nodes {
		where := fmt.Sprintf("Node %q", n.Name)
		if n.Name == "" {
			return fmt.Errorf("node %d: metadata.name: required", i+1)
		}
		if errs := validation.IsDNS1123Subdomain(n.Name); len(errs) > 0 {
			return fmt.Errorf("%s: metadata.name: %s", where, errs[0])
		}
		if seen[n.Name] {
			return fmt.Errorf("%s: metadata.name: duplicate", where)
		}
		seen[n.Name] = true
		for k, v := range n.Labels {
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				return fmt.Errorf("%s: metadata.labels: key %q: %s", where, k, errs[0])
			}
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				return fmt.Errorf("%s: metadata.labels[%s]: value %q: %s", where, k, v, errs[0])
			}
		}
		for j, t := range n.Spec.Taints {
			switch t.Effect {
			case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
			default:
				return fmt.Errorf("%s: spec.taints[%d].effect: must be NoSchedule, PreferNoSchedule or NoExecute, got %q", where, j, t.Effect)
			}
			if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
				return fmt.Errorf("%s: spec.taints[%d].key: %q: %s", where, j, t.Key, errs[0])
			}
		}
		for name, q := range n.Status.Allocatable {
			if q.Sign() < 0 {
				return fmt.Errorf("%s: status.allocatable.%s: must not be negative, got %s", where, name, q.String())
			}
		}
	}
	return nil
}

// completeNodes fills what a kubelet would: the hostname label, capacity and allocatable
// (defaults where absent), and a Ready condition.
func completeNodes(nodes []corev1.Node) []corev1.Node {
	out := make([]corev1.Node, 0, len(nodes))
	for _, n := range nodes {
		n := *n.DeepCopy()
		n.ResourceVersion, n.UID, n.CreationTimestamp = "", "", metav1.Time{}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		if _, ok := n.Labels[hostnameLabel]; !ok {
			n.Labels[hostnameLabel] = n.Name
		}
		n.Labels["kubernetes.io/os"] = "linux"
		if _, ok := n.Labels["kubernetes.io/arch"]; !ok {
			n.Labels["kubernetes.io/arch"] = "amd64"
		}
		if len(n.Status.Allocatable) == 0 {
			n.Status.Allocatable = n.Status.Capacity.DeepCopy()
		}
		for name, q := range defaultAllocatable {
			if _, ok := n.Status.Allocatable[name]; !ok {
				if n.Status.Allocatable == nil {
					n.Status.Allocatable = corev1.ResourceList{}
				}
				n.Status.Allocatable[name] = q
			}
		}
		if len(n.Status.Capacity) == 0 {
			n.Status.Capacity = n.Status.Allocatable.DeepCopy()
		}
		now := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "testcluster fake kubelet", LastHeartbeatTime: now, LastTransitionTime: now,
		}}
		n.Status.Phase = ""
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: n.Name}}
		out = append(out, n)
	}
	return out
}

// checkQuantities names the field and the value of a resource quantity that does not parse (the
// strict decoder's own message names neither).
func checkQuantities(raw []byte) error {
	var m struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Status map[string]interface{} `json:"status"`
	}
	if err := yaml.Unmarshal(raw, &m); err != nil {
		return nil // the strict decoder reports it
	}
	for _, field := range []string{"allocatable", "capacity"} {
		list, _ := m.Status[field].(map[string]interface{})
		for name, v := range list {
			text := fmt.Sprint(v)
			if _, err := resource.ParseQuantity(text); err != nil {
				return fmt.Errorf("Node %q: status.%s.%s: %q is not a quantity (like 8, 500m, 64Gi)",
					m.Metadata.Name, field, name, text)
			}
		}
	}
	return nil
}
