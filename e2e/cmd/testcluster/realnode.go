package main

// --real-node: one Node (--real-nodes N: N Nodes, each its own containerd, kubelet, pods' subnet, cgroup root and
// directories) run by the real kubelet (the control plane's release, `make kubelet`) and Debian's
// containerd and runc (`make node-packages`), next to the fake nodes. Everything it creates on the machine is
// named after this process (its pid) and recorded in /run/testcluster/<pid>/record.json, so that stop, or the
// next --real-node start after this process was killed, removes all of it: processes, mounts, network
// namespaces, veths and routes, cgroups, CNI state, and the kernel settings the kubelet changes.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

const (
	realNodeZone = "zone-real"
	// PauseImage is the sandbox image every pod of the real node starts with (e2e/cmd/pause).
	pauseImage  = "testcluster.local/pause:1"
	registryDir = "/run/testcluster"
	cgroupFS    = "/sys/fs/cgroup"
	sysctlFile  = registryDir + "/sysctl.json"
	containerd  = "/usr/bin/containerd"
	ctrBinary   = "/usr/bin/ctr"
	cniBinDir   = "/usr/lib/cni"
)

// The kernel settings the kubelet sets at start (kernel.panic=10, kernel.panic_on_oops=1,
// vm.overcommit_memory=1): saved by the first real node and restored when the last one stops.
var kubeletSysctls = []string{"kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory"}

// nodeRecord is what one real node created, by name.
type nodeRecord struct {
	Node    string `json:"node"`
	Run     string `json:"run"`     // sockets, containerd's state (netns mounts), the kubelet's root
	State   string `json:"state"`   // containerd's root (images, snapshots), configs, logs
	Cgroup  string `json:"cgroup"`  // the kubelet's cgroupRoot, in every v1 hierarchy
	Subnet  string `json:"subnet"`  // the pods' /24 (ptp + host-local)
	Network string `json:"network"` // the CNI network's name
}

// realNodeRecord is what one --real-node harness created, by name: enough to remove it all. The first node,
// real-0, is also at the top level, as in the records written before --real-nodes (which have no Nodes).
type realNodeRecord struct {
	PID int `json:"pid"`
	nodeRecord
	NodeIP string `json:"nodeIP"`
	// The API server's address for pods: an address of the host's loopback interface, labelled APILabel (this
	// machine has no dummy interfaces), the first address of the service range (the `kubernetes` Service's
	// ClusterIP), routed into every pod through its gateway.
	APILabel   string       `json:"apiLabel"`
	APIAddress string       `json:"apiAddress"`
	Services   string       `json:"services"` // --service-cluster-ip-range
	Nodes      []nodeRecord `json:"nodes,omitempty"`
}

// nodes are every node of the record: Nodes, or in a record written before --real-nodes the top-level one.
func (r realNodeRecord) nodes() []nodeRecord {
	if len(r.Nodes) > 0 {
		return r.Nodes
	}
	return []nodeRecord{r.nodeRecord}
}

// realNodes are the harness's real nodes: what they share (the record, the binaries, the images).
type realNodes struct {
	rec     realNodeRecord
	count   int      // --real-nodes
	kubelet string   // the kubelet binary
	pause   string   // the pause binary
	images  []string // --image: archives imported into every node's containerd (k8s.io namespace)
	nodes   []*realNode
}

// realNode is one of them: its own containerd, kubelet (and ports), pods' subnet, cgroup root and directories.
type realNode struct {
	nodeRecord
	h                 *realNodes
	port, healthzPort int
}

// maxRealNodes bounds --real-nodes: docs/e2e.md ("A real node") says what each costs on this machine.
const maxRealNodes = 8

// realNodeBinaries finds what `make testcluster-real-node` (another minor: `make testcluster-real-node-MINOR`)
// builds and installs; a missing one is exit 2. The kubelet is this minor's, beside this binary; the pause
// binary serves every minor (binRoot).
func realNodeBinaries() (*realNodes, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	root, err := binRoot()
	if err != nil {
		return nil, err
	}
	minor, err := builtMinor()
	if err != nil {
		return nil, err
	}
	target := "testcluster-real-node"
	if minor != defaultMinor {
		target += "-" + minor
	}
	h := &realNodes{count: 1, kubelet: filepath.Join(filepath.Dir(self), "kubelet"), pause: filepath.Join(root, "pause")}
	for _, p := range []string{h.kubelet, h.pause} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("--real-node: %s is missing: `make %s` builds it", p, target)
		}
	}
	for _, p := range []string{containerd, ctrBinary, "/usr/sbin/runc", "/usr/bin/containerd-shim-runc-v2",
		filepath.Join(cniBinDir, "ptp"), filepath.Join(cniBinDir, "host-local"), filepath.Join(cniBinDir, "loopback")} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("--real-node: %s is missing: `make node-packages` installs it (containerd, runc, "+
				"containernetworking-plugins)", p)
		}
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("--real-node: running containers needs root")
	}
	return h, nil
}

// realNodeFlags checks --real-node, --real-nodes (countSet: given) and --image.
func realNodeFlags(o options, countSet bool) (*realNodes, error) {
	if !o.realNode {
		if len(o.images) > 0 {
			return nil, fmt.Errorf("--image needs --real-node; %s", usage)
		}
		if countSet {
			return nil, fmt.Errorf("--real-nodes needs --real-node; %s", usage)
		}
		return nil, nil
	}
	if countSet && (o.realNodes < 1 || o.realNodes > maxRealNodes) {
		return nil, fmt.Errorf("--real-nodes %d: from 1 to %d", o.realNodes, maxRealNodes)
	}
	h, err := realNodeBinaries()
	if err != nil {
		return nil, err
	}
	if countSet {
		h.count = o.realNodes
	}
	for _, image := range o.images {
		if _, err := os.Stat(image); err != nil {
			return nil, fmt.Errorf("--image %v", err)
		}
		abs, _ := filepath.Abs(image)
		h.images = append(h.images, abs)
	}
	return h, nil
}

// names are the real nodes' names (real-0 alone without --real-node: the fake kubelet never runs its pods).
func (h *realNodes) names() map[string]bool {
	if h == nil {
		return map[string]bool{realNodeName(0): true}
	}
	out := map[string]bool{}
	for i := 0; i < h.count; i++ {
		out[realNodeName(i)] = true
	}
	return out
}

func realNodeName(i int) string { return fmt.Sprintf("real-%d", i) }

// newNodeRecord names node i's directories, cgroup and network: real-0's as before --real-nodes, the others'
// after it (their run directory inside real-0's, removed with it).
func newNodeRecord(i, pid, subnet int, dir string) nodeRecord {
	name := realNodeName(i)
	r := nodeRecord{Node: name, Run: filepath.Join(registryDir, strconv.Itoa(pid)), State: filepath.Join(dir, "real-node"),
		Cgroup: fmt.Sprintf("testcluster-%d", pid), Subnet: fmt.Sprintf("%s.%d.0/24", podPrefix, subnet),
		Network: fmt.Sprintf("testcluster-%d", pid)}
	if i > 0 {
		r.Run, r.State = filepath.Join(r.Run, name), r.State+"-"+strconv.Itoa(i)
		r.Cgroup, r.Network = r.Cgroup+"-"+name, r.Network+"-"+name
	}
	return r
}

// prepareRealNodes runs before the API server starts: it removes what killed harnesses left, picks the pods'
// subnets and the API server's address for pods, records them (so that stop, or the next start after a
// SIGKILL, removes everything), and adds that address to the loopback interface under a label of its own.
func (c *cluster) prepareRealNodes() error {
	h := c.realNodes
	if err := os.MkdirAll(registryDir, 0o755); err != nil {
		return err
	}
	sweepDeadRealNodes()
	pid := os.Getpid()
	ip, err := nodeIP()
	if err != nil {
		return err
	}
	subnets, err := freeSubnets(pid, h.count)
	if err != nil {
		return err
	}
	h.rec = realNodeRecord{PID: pid, NodeIP: ip, APILabel: fmt.Sprintf("lo:tc%d", pid),
		APIAddress: fmt.Sprintf("%s.%d.1", servicePrefix, subnets[0]),
		Services:   fmt.Sprintf("%s.%d.0/24", servicePrefix, subnets[0])}
	for i, s := range subnets {
		n := &realNode{nodeRecord: newNodeRecord(i, pid, s, c.dir), h: h}
		h.nodes, h.rec.Nodes = append(h.nodes, n), append(h.rec.Nodes, n.nodeRecord)
		for _, d := range []string{n.Run, filepath.Join(n.State, "cni"), filepath.Join(n.State, "containerd")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
	}
	h.rec.nodeRecord = h.rec.Nodes[0]
	r := h.rec
	if err := saveSysctls(); err != nil {
		return err
	}
	record, _ := json.MarshalIndent(r, "", "  ")
	if err := os.WriteFile(filepath.Join(r.Run, "record.json"), record, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.dir, "real-node.json"), record, 0o644); err != nil {
		return err
	}
	args := []string{"addr", "add", r.APIAddress + "/32", "dev", "lo", "label", r.APILabel}
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// startRealNodes starts every node (prepareRealNodes ran before the API server), at once, and waits for all
// to be Ready. The kubelets' ports are taken together, free on every address (the kubelet listens on the
// node IP, its healthz on loopback), so that neither these nodes nor concurrent harnesses share one.
func (c *cluster) startRealNodes(ctx context.Context, client kubernetes.Interface) error {
	h := c.realNodes
	ports, err := freePortsOn("0.0.0.0", 2*len(h.nodes))
	if err != nil {
		return err
	}
	errs := make([]error, len(h.nodes))
	var wg sync.WaitGroup
	for i, n := range h.nodes {
		n.port, n.healthzPort = ports[2*i], ports[2*i+1]
		wg.Add(1)
		go func(i int, n *realNode) {
			defer wg.Done()
			if err := c.startRealNode(ctx, client, n); err != nil {
				errs[i] = fmt.Errorf("%s: %v", n.Node, err)
			}
		}(i, n)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// component is the name of one of the node's processes (and of its log): real-0's as before --real-nodes.
func (n *realNode) component(name string) string {
	if n.Node == realNodeName(0) {
		return name
	}
	return name + "-" + n.Node
}

// startRealNode starts the node's containerd, imports the images, starts its kubelet and waits for the Node to
// be Ready.
func (c *cluster) startRealNode(ctx context.Context, client kubernetes.Interface, n *realNode) error {
	if err := makeCgroupRoot(n.Cgroup); err != nil {
		return fmt.Errorf("cgroup %s: %v", n.Cgroup, err)
	}
	sock := filepath.Join(n.Run, "containerd.sock")
	cfg, err := n.writeContainerdConfig(sock)
	if err != nil {
		return err
	}
	c.launchExec(n.component("containerd"), containerd, []string{"--config", cfg})
	if err := poll(ctx, 200*time.Millisecond, time.Minute, func() (bool, error) {
		out, err := exec.Command(ctrBinary, "--address", sock, "version").CombinedOutput()
		return err == nil, fmt.Errorf("%v: %s", err, out)
	}); err != nil {
		return fmt.Errorf("containerd not answering: %v", err)
	}
	if err := n.importPause(sock); err != nil {
		return err
	}
	for _, image := range n.h.images {
		out, err := exec.Command(ctrBinary, "--address", sock, "-n", "k8s.io", "images", "import", image).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr images import %s: %v: %s", image, err, out)
		}
	}
	kcfg, err := n.writeKubeletConfig(sock)
	if err != nil {
		return err
	}
	c.launchExec(n.component("kubelet"), n.h.kubelet, []string{
		"--config=" + kcfg, "--kubeconfig=" + c.kubeconfig, "--root-dir=" + filepath.Join(n.Run, "kubelet"),
		"--cert-dir=" + filepath.Join(n.State, "kubelet-pki"), "--hostname-override=" + n.Node,
		"--node-ip=" + n.h.rec.NodeIP, "--node-labels=topology.kubernetes.io/zone=" + realNodeZone,
	})
	err = poll(ctx, 500*time.Millisecond, 3*time.Minute, func() (bool, error) {
		node, err := client.CoreV1().Nodes().Get(ctx, n.Node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, fmt.Errorf("Ready=%s: %s", cond.Status, cond.Message)
			}
		}
		return false, fmt.Errorf("no Ready condition yet")
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready: %v", n.Node, err)
	}
	return nil
}

func (n *realNode) writeContainerdConfig(sock string) (string, error) {
	r := n.nodeRecord
	cni := map[string]interface{}{
		"cniVersion": "0.4.0", "name": r.Network,
		"plugins": []interface{}{map[string]interface{}{
			"type": "ptp", "ipMasq": false,
			"ipam": map[string]interface{}{"type": "host-local", "dataDir": filepath.Join(r.State, "cni", "ipam"),
				"ranges": [][]map[string]string{{{"subnet": r.Subnet}}},
				// the API server, through the pod's gateway (the host); no other destination
				"routes": []map[string]string{{"dst": n.h.rec.APIAddress + "/32"}}},
		}},
	}
	conf, _ := json.MarshalIndent(cni, "", "  ")
	confDir := filepath.Join(r.State, "cni", "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(confDir, "10-testcluster.conflist"), conf, 0o644); err != nil {
		return "", err
	}
	toml := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, filepath.Join(r.State, "containerd", "root"), filepath.Join(r.Run, "containerd"), sock,
		filepath.Join(r.State, "containerd", "opt"), pauseImage, filepath.Join(r.Run, "runc"), cniBinDir, confDir)
	path := filepath.Join(r.State, "containerd.toml")
	return path, os.WriteFile(path, []byte(toml), 0o644)
}

// importPause packs the pause binary as a one-layer image and imports it into containerd's k8s.io namespace.
func (n *realNode) importPause(sock string) error {
	data, err := os.ReadFile(n.h.pause)
	if err != nil {
		return err
	}
	archive := filepath.Join(n.State, "pause.tar")
	if err := writeImageArchive(archive, pauseImage, []imageFile{{path: "pause", mode: 0o755, data: data}},
		[]string{"/pause"}, ""); err != nil {
		return fmt.Errorf("pause image: %v", err)
	}
	out, err := exec.Command(ctrBinary, "--address", sock, "-n", "k8s.io", "images", "import", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %v: %s", archive, err, out)
	}
	return nil
}

func (n *realNode) writeKubeletConfig(sock string) (string, error) {
	r := n.nodeRecord
	cfg := map[string]interface{}{
		"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
		"containerRuntimeEndpoint": "unix://" + sock, "imageServiceEndpoint": "unix://" + sock,
		// this machine's cgroups are v1 (hybrid); 1.35+ refuses v1 unless told
		"failCgroupV1": false, "cgroupDriver": "cgroupfs", "cgroupRoot": "/" + r.Cgroup,
		"cgroupsPerQOS": true, "enforceNodeAllocatable": []string{"pods"},
		"failSwapOn": false, "protectKernelDefaults": false,
		"address": n.h.rec.NodeIP, "port": n.port, "readOnlyPort": 0,
		"healthzBindAddress": "127.0.0.1", "healthzPort": n.healthzPort,
		"authentication": map[string]interface{}{"anonymous": map[string]bool{"enabled": true},
			"webhook": map[string]bool{"enabled": false}},
		"authorization":      map[string]string{"mode": "AlwaysAllow"},
		"resolvConf":         "",
		"podLogsDir":         filepath.Join(r.State, "pod-logs"),
		"volumePluginDir":    filepath.Join(r.State, "volume-plugins"),
		"rotateCertificates": false,
		// the images are imported, never pulled: never collect them
		"imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
		"evictionHard": map[string]string{"memory.available": "100Mi", "nodefs.available": "1%",
			"imagefs.available": "1%"},
		"nodeStatusReportFrequency": "10s",
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	path := filepath.Join(r.State, "kubelet.yaml")
	return path, os.WriteFile(path, out, 0o644)
}

// drainRealNodes cordons the real nodes (so that controllers' replacement pods do not land there), deletes the
// pods bound to them and waits (30 s at most) until the kubelets have stopped them: their sandboxes and network
// namespaces go the ordinary way while containerd still runs.
func (c *cluster) drainRealNodes() {
	client, err := c.client()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cordon := []byte(`{"spec":{"unschedulable":true}}`)
	grace := int64(1)
	for _, n := range c.realNodes.nodes {
		_, _ = client.CoreV1().Nodes().Patch(ctx, n.Node, types.StrategicMergePatchType, cordon, metav1.PatchOptions{})
	}
	for _, n := range c.realNodes.nodes {
		pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Node})
		if err != nil {
			return
		}
		for _, p := range pods.Items {
			_ = client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		}
	}
	_ = poll(ctx, 300*time.Millisecond, 30*time.Second, func() (bool, error) {
		pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if c.realNodes.names()[p.Spec.NodeName] {
				return false, nil
			}
		}
		return true, nil
	})
}

// nodeIP is this machine's first non-loopback IPv4 address on an interface that is up (the node's IP
// cannot be loopback).
func nodeIP() (string, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, i := range ifaces {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && ipn.IP.IsGlobalUnicast() {
				return ipn.IP.String(), nil
			}
		}
	}
	return "", errors.New("--real-node: no non-loopback IPv4 address on this machine for the node")
}

// The pods' subnets are podPrefix.N.0/24; the API server's address for them and the service range of the
// same harness are servicePrefix.N.1 and servicePrefix.N.0/24.
const (
	podPrefix     = "10.244"
	servicePrefix = "10.245"
)

// freeSubnets picks count Ns for which no route and no other real node uses podPrefix.N or servicePrefix.N.
func freeSubnets(pid, count int) ([]int, error) {
	routes, err := exec.Command("ip", "-4", "-o", "route", "show", "table", "all").Output()
	if err != nil {
		return nil, fmt.Errorf("ip route: %v", err)
	}
	addrs, err := exec.Command("ip", "-4", "-o", "addr").Output()
	if err != nil {
		return nil, fmt.Errorf("ip addr: %v", err)
	}
	used := map[string]bool{}
	for _, rec := range realNodeRecords() {
		for _, n := range rec.nodes() {
			used[n.Subnet] = true
		}
	}
	var out []int
	for i := 0; i < 250 && len(out) < count; i++ {
		n := (pid+i)%250 + 1
		taken := used[fmt.Sprintf("%s.%d.0/24", podPrefix, n)]
		for _, prefix := range []string{podPrefix, servicePrefix} {
			p := fmt.Sprintf("%s.%d.", prefix, n)
			taken = taken || strings.Contains(string(routes), p) || strings.Contains(string(addrs), p)
		}
		if !taken {
			out = append(out, n)
		}
	}
	if len(out) < count {
		return nil, fmt.Errorf("--real-node: no %d free 10.244.N.0/24 for the pods", count)
	}
	return out, nil
}

func saveSysctls() error {
	values := map[string]string{}
	for _, k := range kubeletSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return err
		}
		values[k] = strings.TrimSpace(string(v))
	}
	data, _ := json.Marshal(values)
	f, err := os.OpenFile(sysctlFile, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if errors.Is(err, os.ErrExist) {
		return nil // another real node runs (or a killed one left its values): those are the originals
	}
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(data)
	return err
}

// restoreSysctls puts back the saved values once no other real node runs.
func restoreSysctls(self int) {
	for _, rec := range realNodeRecords() {
		if rec.PID != self && alive(rec.PID) {
			return
		}
	}
	data, err := os.ReadFile(sysctlFile)
	if err != nil {
		return
	}
	values := map[string]string{}
	if json.Unmarshal(data, &values) != nil {
		return
	}
	for k, v := range values {
		_ = os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644)
	}
	_ = os.Remove(sysctlFile)
}

// cgroupHierarchies are the mounted v1 hierarchies (and the v2 one, in hybrid mode).
func cgroupHierarchies() []string {
	entries, _ := os.ReadDir(cgroupFS)
	var out []string
	for _, e := range entries {
		p := filepath.Join(cgroupFS, e.Name())
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			out = append(out, p)
		}
	}
	return out
}

func makeCgroupRoot(name string) error {
	for _, h := range cgroupHierarchies() {
		d := filepath.Join(h, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if filepath.Base(h) == "cpuset" { // a new cpuset has no cpus or mems until given its parent's
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func realNodeRecords() []realNodeRecord {
	matches, _ := filepath.Glob(filepath.Join(registryDir, "*", "record.json"))
	var out []realNodeRecord
	for _, m := range matches {
		var rec realNodeRecord
		if data, err := os.ReadFile(m); err == nil && json.Unmarshal(data, &rec) == nil && rec.PID > 0 {
			out = append(out, rec)
		}
	}
	return out
}

// alive says whether pid is a running testcluster.
func alive(pid int) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(cmdline), "testcluster")
}

// sweepDeadRealNodes removes what every real node whose harness is gone (killed) left behind.
func sweepDeadRealNodes() {
	for _, rec := range realNodeRecords() {
		if rec.PID != os.Getpid() && !alive(rec.PID) {
			fmt.Fprintf(os.Stderr, "testcluster: removing what the killed real node of pid %d left\n", rec.PID)
			removeRealNode(rec)
		}
	}
}

// removeRealNode removes everything rec names, in the order that lets each step succeed: processes,
// mounts (which ends the pods' network namespaces), veths and routes, cgroups, files, kernel settings.
func removeRealNode(rec realNodeRecord) {
	nodes := rec.nodes()
	var dirs []string
	for _, n := range nodes {
		if n.Run == "" || n.State == "" || n.Cgroup == "" {
			return
		}
		dirs = append(dirs, n.Run, n.State)
	}
	_ = poll(context.Background(), 100*time.Millisecond, 15*time.Second, func() (bool, error) {
		pids := realNodeProcesses(nodes)
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		return len(pids) == 0, fmt.Errorf("processes left: %v", pids)
	})
	for i := 0; i < 5; i++ {
		mounts := mountsUnder(dirs...)
		if len(mounts) == 0 {
			break
		}
		for _, m := range mounts {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	}
	for _, n := range nodes {
		deleteRoutes(n.Subnet)
	}
	if rec.APIAddress != "" {
		_ = exec.Command("ip", "addr", "del", rec.APIAddress+"/32", "dev", "lo").Run()
	}
	for _, n := range nodes {
		for _, h := range cgroupHierarchies() {
			removeCgroupTree(filepath.Join(h, n.Cgroup))
		}
		removeCNIState(n)
		removeContainerLogLinks(n.State)
	}
	for _, d := range []string{"/var/lib/cni/results", "/var/lib/cni/networks", "/var/lib/cni"} {
		_ = syscall.Rmdir(d) // when empty: nothing else uses it
	}
	removeStaleShimSockets()
	for _, n := range nodes {
		_ = os.RemoveAll(n.State)
	}
	restoreSysctls(rec.PID)
	for _, n := range nodes {
		_ = os.RemoveAll(n.Run)
	}
	_ = syscall.Rmdir(registryDir) // when no other real node is recorded
}

// removeCNIState removes the CNI results containerd caches (a fixed /var/lib/cni in containerd 1.6): the node's
// network's, and the loopback network's for each of its sandboxes.
func removeCNIState(n nodeRecord) {
	results, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", n.Network+"-*"))
	sandboxes, _ := os.ReadDir(filepath.Join(n.State, "containerd", "root", "io.containerd.grpc.v1.cri", "sandboxes"))
	for _, sb := range sandboxes {
		results = append(results, filepath.Join("/var/lib/cni/results", "cni-loopback-"+sb.Name()+"-lo"))
	}
	for _, f := range results {
		_ = os.Remove(f)
	}
	_ = os.RemoveAll(filepath.Join("/var/lib/cni/networks", n.Network))
}

// realNodeProcesses: the nodes' kubelets, containerds and shims (their command lines name their directories or
// sockets), and every process in their cgroups (pause, the containers).
func realNodeProcesses(nodes []nodeRecord) []int {
	seen := map[int]bool{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, n := range nodes {
			if strings.Contains(string(cmdline), filepath.Join(n.Run, "containerd.sock")) ||
				strings.Contains(string(cmdline), n.Run+"/") || strings.Contains(string(cmdline), n.State+"/") {
				seen[pid] = true
			}
		}
	}
	for _, n := range nodes {
		for _, h := range cgroupHierarchies() {
			_ = filepath.Walk(filepath.Join(h, n.Cgroup), func(path string, info os.FileInfo, err error) error {
				if err != nil || info.IsDir() || info.Name() != "cgroup.procs" {
					return nil
				}
				data, _ := os.ReadFile(path)
				for _, f := range strings.Fields(string(data)) {
					if pid, err := strconv.Atoi(f); err == nil {
						seen[pid] = true
					}
				}
				return nil
			})
		}
	}
	out := make([]int, 0, len(seen))
	for pid := range seen {
		out = append(out, pid)
	}
	sort.Ints(out)
	return out
}

// mountsUnder lists the mount points under any of dirs, deepest first.
func mountsUnder(dirs ...string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		for _, d := range dirs {
			if mp == d || strings.HasPrefix(mp, d+"/") {
				out = append(out, mp)
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// deleteRoutes removes the host side of every pod veth in subnet (ptp routes each pod IP to its veth);
// deleting a veth deletes its peer and its route.
func deleteRoutes(subnet string) {
	_, ipnet, err := net.ParseCIDR(subnet)
	if err != nil {
		return
	}
	out, err := exec.Command("ip", "-4", "-o", "route", "show", "table", "all").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 3 {
			continue
		}
		dst := strings.SplitN(fields[0], "/", 2)[0]
		if ip := net.ParseIP(dst); ip == nil || !ipnet.Contains(ip) {
			continue
		}
		for i := 0; i+1 < len(fields); i++ {
			if fields[i] == "dev" {
				_ = exec.Command("ip", "link", "del", fields[i+1]).Run()
				break
			}
		}
		_ = exec.Command("ip", "route", "del", fields[0]).Run()
	}
}

// removeCgroupTree removes a cgroup directory and its children, deepest first.
func removeCgroupTree(root string) {
	var dirs []string
	_ = filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
		if err == nil && info.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for i := 0; i < 20; i++ {
		left := false
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				left = true
			}
		}
		if !left {
			return
		}
		time.Sleep(100 * time.Millisecond) // a killed process leaves its cgroup asynchronously
	}
}

// removeContainerLogLinks removes the kubelet's /var/log/containers links into state (the kubelet writes
// them there whatever its podLogsDir), and the directory when this leaves it empty.
func removeContainerLogLinks(state string) {
	links, _ := filepath.Glob("/var/log/containers/*")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, state+"/") {
			_ = os.Remove(l)
		}
	}
	_ = syscall.Rmdir("/var/log/containers") // when empty
}

// removeStaleShimSockets removes containerd shim sockets (/run/containerd/s/, a fixed path in containerd
// 1.6) that no process listens on any more: what a killed shim leaves.
func removeStaleShimSockets() {
	listening := map[string]bool{}
	if data, err := os.ReadFile("/proc/net/unix"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			fields := strings.Fields(line)
			if len(fields) >= 8 {
				listening[strings.TrimPrefix(fields[7], "@")] = true
			}
		}
	}
	socks, _ := filepath.Glob("/run/containerd/s/*")
	for _, s := range socks {
		if !listening[s] && !listening["/"+s] {
			_ = os.Remove(s)
		}
	}
	_ = syscall.Rmdir("/run/containerd/s")
	_ = syscall.Rmdir("/run/containerd")
}
