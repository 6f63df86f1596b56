package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/embed"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"
)

// Admission plugins turned off, because the controllers they depend on do not run here:
//   - ServiceAccount needs the serviceaccount and token controllers (envtest turns it off too);
//   - TaintNodesByCondition taints every new Node not-ready, a taint only the node-lifecycle
//     controller (which needs kubelet heartbeats) removes.
const disabledAdmission = "ServiceAccount,TaintNodesByCondition"

// The controllers kube-controller-manager runs: what Deployments, StatefulSets, their pods and namespaces need
// (the StatefulSet controller always: it does nothing while no StatefulSet exists).
const controllers = "deployment-controller,replicaset-controller,statefulset-controller," +
	"garbage-collector-controller,namespace-controller"

// cluster is one running control plane.
type cluster struct {
	dir              string
	nodes            []corev1.Node
	schedulerConfig  []byte
	crds             []*unstructured.Unstructured // --crd
	coschedulingPath string                       // --coscheduling: the scheduler-plugins scheduler
	volcano          *volcanoOptions              // --volcano
	operators        *operatorOptions             // --training-operator, --mpi-operator, --koordinator, --jobset, --trainer, --feature-gates
	realNodes        *realNodes                   // --real-node, --real-nodes
	admissionConfig  string                       // --admission-control-config-file, absolute
	failed           chan error
	// takeAPIPort: this start binds the API server's port itself before the API server does, as another process
	// can (the harness's own test of starting again, TESTCLUSTER_TAKE_API_PORT=1, first attempt only).
	takeAPIPort bool
	taken       net.Listener

	etcd       *embed.Etcd
	pki        *pki
	kubeconfig string
	apiHost    string // where the API server listens: loopback, or with a real node the pods' address for it
	apiPort    int
	mu         sync.Mutex
	components map[string]*process
	stopping   bool
}

// process is one control-plane component running as a child process of this binary.
type process struct {
	name string
	args []string // what it was started with, after the program
	cmd  *exec.Cmd
	done chan struct{}
}

func freePorts(n int) ([]int, error) { return freePortsOn("127.0.0.1", n) }

// The ports handed out are below the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by
// default): a port is picked free here and bound later by a component, and a port of that range can be taken in
// between by any outgoing connection on the machine (every other harness's clients and components), which a port
// below it cannot. Two harnesses picking the same one at the same moment is what is left: a random pick of about
// 20,000 makes that rare.
const lowestPort = 10000

// freePortsOn picks n distinct ports free on host (0.0.0.0: on every address), below the ephemeral range.
func freePortsOn(host string, n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	top := ephemeralStart()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("no %d free ports on %s between %d and %d", n, host, lowestPort, top-1)
		}
		port := lowestPort + rand.IntN(top-lowestPort)
		l, err := net.Listen("tcp4", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			continue // taken
		}
		ls = append(ls, l)
		ports = append(ports, port)
	}
	return ports, nil
}

// ephemeralStart is the first port of the kernel's ephemeral range (32768 when it cannot be read).
func ephemeralStart() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if fields := strings.Fields(string(data)); len(fields) == 2 {
			if lo, err := strconv.Atoi(fields[0]); err == nil && lo > lowestPort+1000 {
				return lo
			}
		}
	}
	return 32768
}

func (c *cluster) start(ctx context.Context) error {
	c.components = map[string]*process{}
	ports, err := freePorts(5)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer := ports[0], ports[1]
	c.apiHost, c.apiPort = "127.0.0.1", ports[2]
	schedulerPort, cmPort := ports[3], ports[4]
	if c.takeAPIPort && c.realNodes == nil {
		if c.taken, err = net.Listen("tcp4", net.JoinHostPort(c.apiHost, strconv.Itoa(c.apiPort))); err != nil {
			return err
		}
	}
	services, disabled := "10.96.0.0/16", disabledAdmission
	// On loopback nothing maintains the `kubernetes` Service's endpoints: an endpoint cannot be a loopback address
	// (Kubernetes 1.37 refuses to start the reconciler with one; 1.36 wrote it anyway), and nothing here routes
	// to one.
	apiServerExtra, cmExtra := []string{"--endpoint-reconciler-type=none"}, []string(nil)
	if c.realNodes != nil {
		// Pods reach the API server at the `kubernetes` Service's ClusterIP, 443, as the kubelet tells them
		// (KUBERNETES_SERVICE_HOST/PORT): with no kube-proxy to translate it, the API server itself listens
		// there (an address this harness adds to the host's loopback interface), and advertises it as the Service's endpoint.
		if err := c.prepareRealNodes(); err != nil {
			return fmt.Errorf("real node: %v", err)
		}
		c.apiHost, c.apiPort, services = c.realNodes.rec.APIAddress, 443, c.realNodes.rec.Services
		// Pods get service-account tokens (projected, TokenRequest): the ServiceAccount admission plugin,
		// with the serviceaccount controller (each namespace's `default`) and the kube-root-ca.crt publisher.
		disabled = "TaintNodesByCondition"
		// `kubectl logs` and `exec` dial the kubelet at the node's InternalIP (its hostname does not resolve); the
		// default endpoint reconciler keeps the `kubernetes` Service's endpoint, the address above.
		apiServerExtra = []string{"--kubelet-preferred-address-types=InternalIP,Hostname"}
		cmExtra = []string{"--root-ca-file=" + filepath.Join(c.dir, "pki", "ca.crt")}
	}

	if c.admissionConfig != "" {
		apiServerExtra = append(apiServerExtra, "--admission-control-config-file="+c.admissionConfig)
	}
	if c.pki, err = newPKI(filepath.Join(c.dir, "pki"), c.apiHost); err != nil {
		return fmt.Errorf("certificates: %v", err)
	}
	if err := c.startEtcd(etcdClient, etcdPeer); err != nil {
		return fmt.Errorf("etcd: %v", err)
	}
	c.kubeconfig = filepath.Join(c.dir, "kubeconfig")
	if err := c.writeKubeconfig(); err != nil {
		return err
	}
	c.launch("kube-apiserver", "apiserver", append([]string{
		"--etcd-servers=" + fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		"--bind-address=" + c.apiHost, "--advertise-address=" + c.apiHost,
		"--secure-port=" + strconv.Itoa(c.apiPort),
		"--tls-cert-file=" + c.pki.servingCert, "--tls-private-key-file=" + c.pki.servingKey,
		"--cert-dir=" + filepath.Join(c.dir, "pki"),
		"--token-auth-file=" + c.pki.tokenFile,
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=" + services,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + c.pki.serviceAccountPub,
		"--service-account-signing-key-file=" + c.pki.serviceAccountKey,
		"--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ValidatingAdmissionPolicy",
		"--disable-admission-plugins=" + disabled,
		"--allow-privileged=true",
		// Webhooks and APIServices behind a Service are called at their endpoints, never at a
		// ClusterIP: nothing routes the service range here, and with no endpoints a call fails at
		// once instead of hanging until the webhook's timeout.
		"--enable-aggregator-routing=true",
		"--profiling=false",
	}, append(apiServerExtra, c.operators.apiServerArgs()...)...))
	client, err := c.client()
	if err != nil {
		return err
	}
	if err := c.waitAPIServer(ctx, client, 3*time.Minute); err != nil {
		return err
	}

	authn := []string{"--authentication-kubeconfig=" + c.kubeconfig, "--authorization-kubeconfig=" + c.kubeconfig,
		"--bind-address=127.0.0.1"}
	c.launch("kube-controller-manager", "controller-manager", append([]string{
		"--kubeconfig=" + c.kubeconfig, "--leader-elect=false", "--controllers=" + c.controllers(),
		"--secure-port=" + strconv.Itoa(cmPort), "--profiling=false",
		// the default 20 QPS makes the ReplicaSet controller the bottleneck of tests that create thousands of pods
		"--kube-api-qps=100", "--kube-api-burst=200",
	}, append(append(authn, cmExtra...), c.operators.featureGateArgs()...)...))
	schedCfg, err := c.writeSchedulerConfig()
	if err != nil {
		return err
	}
	c.launch("kube-scheduler", "scheduler", append([]string{
		"--config=" + schedCfg, "--secure-port=" + strconv.Itoa(schedulerPort), "--profiling=false",
	}, append(authn, c.operators.featureGateArgs()...)...))

	if err := createNodes(ctx, client, c.nodes); err != nil {
		return fmt.Errorf("nodes: %v", err)
	}
	if err := runFakeKubelet(ctx, client, c.realNodes.names()); err != nil {
		return err
	}
	healthz := map[string]int{"kube-scheduler": schedulerPort, "kube-controller-manager": cmPort}
	if err := c.installCRDs(ctx); err != nil {
		return err
	}
	if c.coschedulingPath != "" {
		port, err := c.startCoscheduling()
		if err != nil {
			return fmt.Errorf("%s: %v", coschedulingBinary, err)
		}
		healthz[coschedulingBinary] = port
	}
	for name, port := range healthz {
		if err := waitHealthy(ctx, name, port, 2*time.Minute); err != nil {
			return err
		}
	}
	if c.realNodes != nil {
		if err := c.startRealNodes(ctx, client); err != nil {
			return fmt.Errorf("real node: %v", err)
		}
	}
	if c.volcano != nil {
		if err := c.startVolcano(ctx, client); err != nil {
			return fmt.Errorf("volcano: %v", err)
		}
	}
	return c.startOperators(ctx, client)
}

func (c *cluster) startEtcd(clientPort, peerPort int) error {
	cfg := embed.NewConfig()
	cfg.Name = "testcluster"
	cfg.Dir = filepath.Join(c.dir, "etcd")
	cfg.UnsafeNoFsync = true
	cu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	pu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(c.dir, "etcd.log")}
	if err := os.RemoveAll(cfg.Dir); err != nil {
		return err
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return fmt.Errorf("not ready after 60s")
	}
	c.etcd = e
	go func() {
		if err, ok := <-e.Err(); ok && err != nil {
			c.failed <- fmt.Errorf("etcd: %v", err)
		}
	}()
	return nil
}

func (c *cluster) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testcluster"] = &clientcmdapi.Cluster{
		Server: fmt.Sprintf("https://%s", net.JoinHostPort(c.apiHost, strconv.Itoa(c.apiPort))), CertificateAuthorityData: c.pki.caCert}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: c.pki.adminToken}
	cfg.Contexts["testcluster"] = &clientcmdapi.Context{Cluster: "testcluster", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "testcluster"
	return clientcmd.WriteToFile(*cfg, c.kubeconfig)
}

func (c *cluster) client() (*kubernetes.Clientset, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = 200, 400
	return kubernetes.NewForConfig(rc)
}

// dynamicClient is a dynamic client of the cluster (CRDs and the objects of extra components).
func (c *cluster) dynamicClient() (dynamic.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return nil, err
	}
	return dynamic.NewForConfig(rc)
}

// kubeSchedulerConfig is a KubeSchedulerConfiguration of one profile for a scheduler run beside the
// cluster: no leader election, the cluster's kubeconfig.
func (c *cluster) kubeSchedulerConfig(profile map[string]interface{}) map[string]interface{} {
	return map[string]interface{}{
		"apiVersion":       "kubescheduler.config.k8s.io/v1",
		"kind":             "KubeSchedulerConfiguration",
		"leaderElection":   map[string]interface{}{"leaderElect": false},
		"clientConnection": map[string]interface{}{"kubeconfig": c.kubeconfig},
		"profiles":         []interface{}{profile},
	}
}

// readSchedulerConfig checks that a --scheduler-config file is a KubeSchedulerConfiguration.
func readSchedulerConfig(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m map[string]interface{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	if m["kind"] != "KubeSchedulerConfiguration" {
		return nil, fmt.Errorf("kind: must be KubeSchedulerConfiguration, got %v", m["kind"])
	}
	return data, nil
}

// writeSchedulerConfig writes the scheduler's config: the user's, or the default profile, pointed
// at this cluster's kubeconfig with leader election off.
func (c *cluster) writeSchedulerConfig() (string, error) {
	m := map[string]interface{}{"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}
	if c.schedulerConfig != nil {
		if err := yaml.Unmarshal(c.schedulerConfig, &m); err != nil {
			return "", err
		}
	}
	m["clientConnection"] = merge(m["clientConnection"], map[string]interface{}{"kubeconfig": c.kubeconfig})
	m["leaderElection"] = merge(m["leaderElection"], map[string]interface{}{"leaderElect": false})
	out, err := yaml.Marshal(m)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.dir, "scheduler-config.yaml")
	return path, os.WriteFile(path, out, 0o644)
}

func merge(base interface{}, over map[string]interface{}) map[string]interface{} {
	out := map[string]interface{}{}
	if b, ok := base.(map[string]interface{}); ok {
		for k, v := range b {
			out[k] = v
		}
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// launch starts a component as `<this binary> <sub> <args>`, logging to DIR/<name>.log. A
// component that exits while the cluster is not stopping fails the cluster.
func (c *cluster) launch(name, sub string, args []string) {
	self, err := os.Executable()
	if err != nil {
		c.failed <- err
		return
	}
	c.launchExec(name, self, append([]string{sub}, args...))
}

// launchExec starts the program at path as the component name (see launch).
func (c *cluster) launchExec(name, path string, args []string) {
	c.launchEnv(name, path, args)
}

// launchEnv is launchExec with environment variables added to this process's own.
func (c *cluster) launchEnv(name, path string, args []string, env ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping { // an attempt given up (main's failed): its start may still be running
		return
	}
	p := &process{name: name, args: args, done: make(chan struct{})}
	c.components[name] = p
	logf, err := os.OpenFile(filepath.Join(c.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.failed <- err
		return
	}
	p.cmd = exec.Command(path, args...)
	if len(env) > 0 {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	// The children die with this process, whatever kills it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		c.failed <- fmt.Errorf("%s: %v", name, err)
		return
	}
	go func() {
		err := p.cmd.Wait()
		logf.Close()
		close(p.done)
		c.mu.Lock()
		expected := c.stopping || c.components[name] != p
		c.mu.Unlock()
		if !expected {
			c.failed <- fmt.Errorf("%s exited: %v; the end of its log:\n%s", name, err,
				logTail(filepath.Join(c.dir, name+".log"), logTailLines))
		}
	}()
}

// logTailLines is how many of a component's last log lines its unexpected exit quotes: its reason is there, and
// a test's log keeps it after the cluster's directory is gone.
const logTailLines = 12

// logTail is the last n lines of the file at path, each indented (or why it cannot be read).
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "    " + err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, line := range lines {
		if len(line) > 400 {
			line = line[:400] + " ..."
		}
		lines[i] = "    " + line
	}
	return strings.Join(lines, "\n")
}

// startAttempts is how many times testcluster starts a cluster whose components found a port taken.
const startAttempts = 3

// portTaken says whether this start failed because a port picked free was bound by another process first: err
// says so, or a component's log does.
func (c *cluster) portTaken(err error) bool {
	const inUse = "address already in use"
	if strings.Contains(err.Error(), inUse) {
		return true
	}
	logs, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
	for _, path := range logs {
		if data, err := os.ReadFile(path); err == nil && strings.Contains(string(data), inUse) {
			return true
		}
	}
	return false
}

// keepLogs moves the components' logs of a failed attempt into dir.
func (c *cluster) keepLogs(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	logs, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
	for _, path := range logs {
		if err := os.Rename(path, filepath.Join(dir, filepath.Base(path))); err != nil {
			return err
		}
	}
	return nil
}

// controllers are the controllers kube-controller-manager runs: with a real node, also the endpoint
// controllers, so that a Service (a webhook's) has the pod IPs of its ready pods as endpoints, and what
// service-account tokens need (each namespace's `default` ServiceAccount, the kube-root-ca.crt ConfigMap),
// and the disruption controller (a PodDisruptionBudget's status: what `kubectl drain` and `helm --wait` read).
func (c *cluster) controllers() string {
	if c.realNodes != nil {
		return c.operators.controllers() + ",endpoints-controller,endpointslice-controller," +
			"serviceaccount-controller,root-ca-certificate-publisher-controller,disruption-controller"
	}
	return c.operators.controllers()
}

// stop ends every component: SIGTERM, then SIGKILL after 6 s; then etcd. A real node's pods are deleted
// first (while its kubelet and the API server run), and what is left of it is removed last.
func (c *cluster) stop() {
	if c.realNodes != nil && c.realNodes.rec.PID != 0 && c.components["kube-apiserver"] != nil {
		c.drainRealNodes()
	}
	c.mu.Lock()
	c.stopping = true
	procs := make([]*process, 0, len(c.components))
	for _, p := range c.components {
		procs = append(procs, p)
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func(p *process) {
			defer wg.Done()
			terminate(p, 6*time.Second)
		}(p)
	}
	wg.Wait()
	if c.etcd != nil {
		done := make(chan struct{})
		go func() { c.etcd.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
	}
	if c.realNodes != nil && c.realNodes.rec.PID != 0 {
		removeRealNode(c.realNodes.rec)
	}
	if c.taken != nil {
		c.taken.Close()
	}
}

func terminate(p *process, grace time.Duration) {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// restartAPIServer stops the API server and starts it again on the same port: every watch breaks,
// and events during the gap are seen by clients only through a re-list.
func (c *cluster) restartAPIServer(ctx context.Context) {
	c.mu.Lock()
	old := c.components["kube-apiserver"]
	c.mu.Unlock()
	if old == nil {
		return
	}
	c.mu.Lock()
	c.components["kube-apiserver"] = nil
	c.mu.Unlock()
	terminate(old, 6*time.Second)
	c.launchExec("kube-apiserver", old.cmd.Path, old.args)
	client, err := c.client()
	if err == nil {
		err = c.waitAPIServer(ctx, client, 3*time.Minute)
	}
	if err != nil {
		c.failed <- fmt.Errorf("restarting kube-apiserver: %v", err)
		return
	}
	fmt.Fprintln(os.Stderr, "testcluster: kube-apiserver restarted")
}

// compactEtcd compacts etcd's history up to its current revision: watches from an older
// resourceVersion then answer 410 Gone once the API server's watch cache no longer has them.
func (c *cluster) compactEtcd(ctx context.Context) {
	rev := c.etcd.Server.KV().Rev()
	_, err := c.etcd.Server.Compact(ctx, &pb.CompactionRequest{Revision: rev, Physical: true})
	if err != nil {
		fmt.Fprintf(os.Stderr, "testcluster: compacting etcd at revision %d: %v\n", rev, err)
		return
	}
	fmt.Fprintf(os.Stderr, "testcluster: etcd compacted at revision %d\n", rev)
}

func (c *cluster) waitAPIServer(ctx context.Context, client *kubernetes.Clientset, timeout time.Duration) error {
	err := poll(ctx, 200*time.Millisecond, timeout, func() (bool, error) {
		select {
		case <-c.components["kube-apiserver"].done:
			return false, fmt.Errorf("kube-apiserver exited")
		default:
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, fmt.Errorf("%v %s", err, body)
		}
		// RBAC's bootstrap policy must exist before any other component starts.
		_, err = client.RbacV1().ClusterRoles().Get(ctx, "cluster-admin", metav1.GetOptions{})
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("kube-apiserver not ready: %v", err)
	}
	return nil
}

func waitHealthy(ctx context.Context, name string, port int, timeout time.Duration) error {
	return waitURLHealthy(ctx, name, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), timeout, nil)
}

// waitURLHealthy polls url until it answers 200; alive, when set, ends the wait with its error
// (a component that exited).
func waitURLHealthy(ctx context.Context, name, url string, timeout time.Duration, alive func() error) error {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // self-signed loopback certificates
	err := poll(ctx, 200*time.Millisecond, timeout, func() (bool, error) {
		if alive != nil {
			if err := alive(); err != nil {
				return false, err
			}
		}
		resp, err := hc.Get(url)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("/healthz: %s", resp.Status)
	})
	if err != nil {
		return fmt.Errorf("%s not healthy: %v", name, err)
	}
	return nil
}

// createNodes creates the Nodes, then sets their status (allocatable, Ready) as a kubelet would.
func createNodes(ctx context.Context, client kubernetes.Interface, nodes []corev1.Node) error {
	for i := range nodes {
		n := nodes[i]
		created, err := client.CoreV1().Nodes().Create(ctx, &n, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			created, err = client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		}
		if err != nil {
			return fmt.Errorf("%s: %v", n.Name, err)
		}
		created.Status = n.Status
		if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("%s status: %v", n.Name, err)
		}
	}
	return nil
}
