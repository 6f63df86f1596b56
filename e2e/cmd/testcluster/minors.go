package main

// --kubernetes MINOR: the Kubernetes minor of the control plane, kubectl and the real node's kubelet. One source
// tree is built against each minor's modules: e2e/go.mod for the default minor (`make testcluster`, into bin/),
// e2e/go.k8s-<minor>.mod for each other one (`make testcluster-<minor>`, into bin/<minor>/, with that minor's
// kubectl and kubelet beside it). The default minor's testcluster runs another minor by executing that minor's
// build in its place (same pid, same arguments), so a caller always starts bin/testcluster. What does not depend
// on the minor (Volcano, the operators, the second schedulers, the pause binary) is built once, into bin/, and
// serves every minor.

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
)

// defaultMinor is what --kubernetes defaults to: the minor e2e/go.mod pins.
const defaultMinor = "1.37"

// minors are the values of --kubernetes, newest first.
var minors = []string{"1.37", "1.36"}

// workloadAPIVersions: the version of scheduling.k8s.io serving Workload and PodGroup in each minor. It is off
// unless --runtime-config turns it on (an alpha API in 1.36; a beta API, off by default, in 1.37), and with it
// off the GenericWorkload gate serves nothing.
var workloadAPIVersions = map[string]string{"1.37": "v1beta1", "1.36": "v1alpha2"}

// compositePodGroupAPIVersion serves CompositePodGroup in 1.37 (alpha, behind the CompositePodGroup gate).
var compositePodGroupAPIVersion = map[string]string{"1.37": "v1alpha3"}

// execedEnv marks a testcluster started by another minor's testcluster: it must be the minor asked for.
const execedEnv = "TESTCLUSTER_MINOR_EXEC"

// builtMinor is the minor of the k8s.io/kubernetes module this binary was built with ("1.37").
func builtMinor() (string, error) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", fmt.Errorf("no build information in this binary")
	}
	for _, m := range info.Deps {
		if m.Path != "k8s.io/kubernetes" {
			continue
		}
		v := m.Version
		if m.Replace != nil && m.Replace.Version != "" {
			v = m.Replace.Version
		}
		parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
		if len(parts) < 2 {
			return "", fmt.Errorf("k8s.io/kubernetes %s: not a release version", v)
		}
		return parts[0] + "." + parts[1], nil
	}
	return "", fmt.Errorf("built without k8s.io/kubernetes")
}

// binRoot is the directory of the default minor's binaries and of every minor-independent component: this
// binary's directory for the default minor, its parent for another minor (bin/<minor>/testcluster).
func binRoot() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	minor, err := builtMinor()
	if err != nil {
		return "", err
	}
	if minor == defaultMinor {
		return filepath.Dir(self), nil
	}
	return filepath.Dir(filepath.Dir(self)), nil
}

// minorBinary is where `make` puts a minor's build of name (testcluster, kubectl, kubelet) under root.
func minorBinary(root, minor, name string) string {
	if minor == defaultMinor {
		return filepath.Join(root, name)
	}
	return filepath.Join(root, minor, name)
}

// makeTarget is the make target that builds a minor's testcluster and kubectl.
func makeTarget(minor string) string {
	if minor == defaultMinor {
		return "testcluster"
	}
	return "testcluster-" + minor
}

// checkMinor checks --kubernetes against the minors this harness knows.
func checkMinor(minor string) error {
	for _, m := range minors {
		if m == minor {
			return nil
		}
	}
	return fmt.Errorf("--kubernetes %q: must be one of %s", minor, strings.Join(minors, ", "))
}

// execMinor replaces this process by the testcluster built for minor, with the same arguments. It returns
// only on an error: exit status 2 for a minor not built, 1 otherwise.
func execMinor(minor string) int {
	if os.Getenv(execedEnv) != "" {
		return fail(1, "--kubernetes %s: this testcluster, started for it, was built for another minor: "+
			"`make %s` rebuilds it", minor, makeTarget(minor))
	}
	root, err := binRoot()
	if err != nil {
		return fail(1, "%v", err)
	}
	path := minorBinary(root, minor, "testcluster")
	if _, err := os.Stat(path); err != nil {
		return fail(2, "--kubernetes %s: %s is missing: `make %s` builds it", minor, path, makeTarget(minor))
	}
	env := append(os.Environ(), execedEnv+"="+minor)
	err = syscall.Exec(path, append([]string{path}, os.Args[1:]...), env)
	return fail(1, "--kubernetes %s: %s: %v", minor, path, err)
}
