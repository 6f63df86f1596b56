// Command noopwebhook is the floor of bench/bench_apiserver.py: a mutating admission webhook on
// Go's standard library alone that admits every object unchanged. What the API server spends on
// calling it (its TLS client, encoding the AdmissionReview, reading the answer) is the cost of
// calling any webhook; a real webhook's added latency is judged against it.
//
// It serves POST /mutate and GET /healthz over TLS with net/http's defaults, so it offers HTTP/2 by
// ALPN as most Go webhooks do (--http1: HTTP/1.1 only). The API server takes HTTP/2 only from a webhook
// it reaches by a loopback URL; through a Service it asks for HTTP/1.1 (k8s.io/apiserver
// pkg/util/webhook/client.go, kubernetes#75791).
//
// --spread makes it the floor of a webhook that mutates: it answers a Deployment without spread
// constraints with the answer policylib gives it with its default settings, the same JSON patch (the three record annotations, then the zone and host constraints selecting the
// Deployment's own pods, with matchLabelKeys) and the same audit annotation, so the API server's
// cost of applying the patch is counted as it is for policylib. --settings-hash is the value of the
// settings record (bench/bench_apiserver.py takes it from policylib and checks every arm's answers
// against policylib's own). --constraints-only writes the two constraints alone instead (no records,
// no matchLabelKeys, no audit annotation): the smaller patch the floor used to be, kept to measure what
// the rest of policylib's answer costs the API server.
//
// --read-hpas (with --api-server, --token-file and --api-ca) makes it also read, on every Deployment
// CREATE, the namespace's HorizontalPodAutoscalers from the API server (one consistent list, limit 500,
// on a kept-alive connection, decoded), as policylib's rule W4 does: the floor of a webhook that proves
// no HPA targets the Deployment before it writes the spread.
// Usage: noopwebhook --cert tls.crt --key tls.key --addr 127.0.0.1:PORT [--http1] [--spread]
//
//	[--read-hpas --api-server https://HOST:PORT --token-file FILE --api-ca FILE]
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// review is the part of an admission.k8s.io/v1 AdmissionReview this webhook reads.
type review struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID       string `json:"uid"`
		Operation string `json:"operation"`
		Namespace string `json:"namespace"`
		Kind      struct {
			Kind string `json:"kind"`
		} `json:"kind"`
		Object *struct {
			Metadata struct {
				Name        string            `json:"name"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Spec struct {
				Replicas *int32 `json:"replicas"`
				Selector *struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				Template struct {
					Spec struct {
						TopologySpreadConstraints []json.RawMessage `json:"topologySpreadConstraints"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		} `json:"object"`
	} `json:"request"`
}

type response struct {
	UID              string            `json:"uid"`
	Allowed          bool              `json:"allowed"`
	PatchType        string            `json:"patchType,omitempty"`
	Patch            []byte            `json:"patch,omitempty"`
	AuditAnnotations map[string]string `json:"auditAnnotations,omitempty"`
}

type constraint struct {
	MaxSkew           int                          `json:"maxSkew"`
	TopologyKey       string                       `json:"topologyKey"`
	WhenUnsatisfiable string                       `json:"whenUnsatisfiable"`
	LabelSelector     map[string]map[string]string `json:"labelSelector"`
	NodeTaintsPolicy  string                       `json:"nodeTaintsPolicy"`
	MatchLabelKeys    []string                     `json:"matchLabelKeys,omitempty"`
}

// op is one JSON patch operation, its fields in policylib's order.
type op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

const (
	zoneKey       = "topology.kubernetes.io/zone"
	hostKey       = "kubernetes.io/hostname"
	recordPrefix  = "policylib.io/spread-"
	hostPreferred = "host spread is a preference: whenUnsatisfiable ScheduleAnyway"
)

var (
	spread          = false
	settingsHash    = ""
	constraintsOnly = false
)

// hpaReader lists a namespace's HPAs from the API server (rule W4's read, in Go).
type hpaReader struct {
	server string
	token  string
	client *http.Client
}

type hpaList struct {
	Metadata struct {
		Continue string `json:"continue"`
	} `json:"metadata"`
	Items []struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			MinReplicas    *int32 `json:"minReplicas"`
			ScaleTargetRef struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Name       string `json:"name"`
			} `json:"scaleTargetRef"`
		} `json:"spec"`
	} `json:"items"`
}

var reader *hpaReader

// minReplicas reads the namespace's HPAs and returns the highest minReplicas of those targeting the
// Deployment and that HPA's name ("" when none does).
func (r *hpaReader) minReplicas(namespace, name string) (int32, string, error) {
	req, err := http.NewRequest(http.MethodGet, r.server+"/apis/autoscaling/v2/namespaces/"+
		url.PathEscape(namespace)+"/horizontalpodautoscalers?limit=500", nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	req.Header.Set("Accept", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, "", fmt.Errorf("HPA list: %d %s", resp.StatusCode, body)
	}
	var list hpaList
	if err := json.Unmarshal(body, &list); err != nil {
		return 0, "", err
	}
	best, bestName, found := int32(0), "", false
	for _, h := range list.Items {
		ref := h.Spec.ScaleTargetRef
		if ref.Kind == "Deployment" && ref.Name == name && strings.HasPrefix(ref.APIVersion, "apps/") {
			m := int32(1)
			if h.Spec.MinReplicas != nil {
				m = *h.Spec.MinReplicas
			}
			// policylib's choice: the highest minReplicas, the last name among equal ones
			if !found || m > best || (m == best && h.Metadata.Name > bestName) {
				best, bestName, found = m, h.Metadata.Name, true
			}
		}
	}
	return best, bestName, nil
}

// spreadPatch is policylib's default answer to a Deployment without spread constraints (nor its
// autoscaling-min-replicas annotation, nor more than one HPA, which policylib also warns of): the record
// annotations (effective replicas, settings, topology keys), then a zone and a host constraint (both
// ScheduleAnyway, maxSkew 1, taints honored, matchLabelKeys pod-template-hash) selecting the
// Deployment's own pods; and the reasons policylib records as an audit annotation. hpaMin and hpaName
// are the HPA a read found (0 and "" without one).
func spreadPatch(in *review, hpaMin int32, hpaName string) ([]byte, string) {
	obj := in.Request.Object
	if obj == nil || obj.Spec.Selector == nil || len(obj.Spec.Selector.MatchLabels) == 0 ||
		len(obj.Spec.Template.Spec.TopologySpreadConstraints) > 0 {
		return nil, ""
	}
	selector := map[string]map[string]string{"matchLabels": obj.Spec.Selector.MatchLabels}
	if constraintsOnly {
		patch, _ := json.Marshal([]op{{"add", "/spec/template/spec/topologySpreadConstraints", []constraint{
			{1, zoneKey, "ScheduleAnyway", selector, "Honor", nil}, {1, hostKey, "ScheduleAnyway", selector, "Honor", nil},
		}}})
		return patch, ""
	}
	effective, source := int32(1), "spec.replicas absent (defaults to 1)"
	if obj.Spec.Replicas != nil {
		effective, source = *obj.Spec.Replicas, fmt.Sprintf("spec.replicas %d", *obj.Spec.Replicas)
	}
	if hpaName != "" {
		effective, source = hpaMin, fmt.Sprintf("HorizontalPodAutoscaler %s minReplicas %d", hpaName, hpaMin)
	}
	records := [][2]string{{"effective-replicas", fmt.Sprint(effective)}, {"settings", settingsHash},
		{"topology-keys", zoneKey + "," + hostKey}}
	var ops []op
	if obj.Metadata.Annotations == nil {
		all := map[string]string{}
		for _, r := range records {
			all[recordPrefix+r[0]] = r[1]
		}
		ops = append(ops, op{"add", "/metadata/annotations", all})
	} else {
		for _, r := range records {
			ops = append(ops, op{"add", "/metadata/annotations/policylib.io~1spread-" + r[0], r[1]})
		}
	}
	keys := []string{"pod-template-hash"}
	ops = append(ops, op{"add", "/spec/template/spec/topologySpreadConstraints", []constraint{
		{1, zoneKey, "ScheduleAnyway", selector, "Honor", keys},
		{1, hostKey, "ScheduleAnyway", selector, "Honor", keys},
	}})
	patch, _ := json.Marshal(ops)
	reasons := fmt.Sprintf("effective replicas %d (%s); zone spread on %s: maxSkew 1, ScheduleAnyway; %s",
		effective, source, zoneKey, hostPreferred)
	return patch, reasons
}

type answer struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Response   response `json:"response"`
}

const maxBody = 3 << 20

func mutate(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		http.Error(w, "body unreadable or too large", http.StatusBadRequest)
		return
	}
	var in review
	if err := json.Unmarshal(body, &in); err != nil || in.Request == nil || in.Request.UID == "" {
		http.Error(w, "not an AdmissionReview with request.uid", http.StatusBadRequest)
		return
	}
	resp := response{UID: in.Request.UID, Allowed: true}
	var hpaMin int32
	var hpaName string
	if reader != nil && in.Request.Operation == "CREATE" && in.Request.Kind.Kind == "Deployment" &&
		in.Request.Object != nil && in.Request.Object.Metadata.Name != "" {
		if hpaMin, hpaName, err = reader.minReplicas(in.Request.Namespace, in.Request.Object.Metadata.Name); err != nil {
			log.Printf("HPA read failed: %v", err)
		}
	}
	if spread && in.Request.Kind.Kind == "Deployment" {
		if patch, reasons := spreadPatch(&in, hpaMin, hpaName); patch != nil {
			resp.PatchType, resp.Patch = "JSONPatch", patch
			if reasons != "" {
				resp.AuditAnnotations = map[string]string{"reasons": reasons}
			}
		}
	}
	out, _ := json.Marshal(answer{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview", Response: resp})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func main() {
	cert := flag.String("cert", "", "serving certificate (PEM)")
	key := flag.String("key", "", "its private key (PEM)")
	addr := flag.String("addr", "127.0.0.1:8443", "address to listen on")
	http1 := flag.Bool("http1", false, "offer HTTP/1.1 only (no HTTP/2 by ALPN)")
	flag.BoolVar(&spread, "spread", false, "answer Deployments without spread constraints as policylib does by default")
	flag.StringVar(&settingsHash, "settings-hash", "", "with --spread: the value of policylib's settings record")
	flag.BoolVar(&constraintsOnly, "constraints-only", false, "with --spread: write the two constraints alone")
	readHpas := flag.Bool("read-hpas", false, "read the namespace's HPAs from the API server on every Deployment CREATE")
	apiServer := flag.String("api-server", "", "with --read-hpas: the API server's URL")
	tokenFile := flag.String("token-file", "", "with --read-hpas: a file holding the bearer token")
	apiCA := flag.String("api-ca", "", "with --read-hpas: the API server's CA (PEM)")
	flag.Parse()
	if *cert == "" || *key == "" {
		fmt.Fprintln(os.Stderr, "noopwebhook: --cert and --key are required")
		os.Exit(2)
	}
	if *readHpas {
		token, err1 := os.ReadFile(*tokenFile)
		caPEM, err2 := os.ReadFile(*apiCA)
		pool := x509.NewCertPool()
		if err1 != nil || err2 != nil || *apiServer == "" || !pool.AppendCertsFromPEM(caPEM) {
			fmt.Fprintln(os.Stderr, "noopwebhook: --read-hpas needs --api-server, --token-file and --api-ca (PEM)")
			os.Exit(2)
		}
		transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 64,
			IdleConnTimeout: 90 * time.Second}
		reader = &hpaReader{server: strings.TrimRight(*apiServer, "/"), token: strings.TrimSpace(string(token)),
			client: &http.Client{Transport: transport, Timeout: 2 * time.Second}}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate", mutate)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	server := &http.Server{Addr: *addr, Handler: mux}
	if *http1 {
		server.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	log.Printf("noopwebhook serving https://%s (HTTP/2 offered: %v)", *addr, !*http1)
	log.Fatal(server.ListenAndServeTLS(*cert, *key))
}
