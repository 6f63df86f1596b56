package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"runtime"
	"strings"
	"time"
)

// imageFile is one regular file of a one-layer image.
type imageFile struct {
	path string // inside the image, without a leading slash
	mode int64
	data []byte
}

// writeImageArchive writes a one-layer image as a tar that is both an OCI image layout (index.json,
// oci-layout, blobs/sha256/...) and a docker archive (manifest.json with RepoTags), the format `docker
// save` writes: `ctr images import`, `docker load`, `podman load` and `kind load image-archive` read it.
// ref is the image's full name with a tag (never latest).
func writeImageArchive(path, ref string, files []imageFile, entrypoint []string, user string) error {
	epoch := time.Unix(0, 0).UTC()
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	for _, f := range files {
		if err := lw.WriteHeader(&tar.Header{Name: f.path, Mode: f.mode, Size: int64(len(f.data)),
			ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := lw.Write(f.data); err != nil {
			return err
		}
	}
	if err := lw.Close(); err != nil {
		return err
	}
	layerDigest := digest(layer.Bytes())
	config, err := json.Marshal(map[string]interface{}{
		"architecture": runtime.GOARCH, "os": "linux", "created": epoch.Format(time.RFC3339),
		"config": map[string]interface{}{"Entrypoint": entrypoint, "User": user,
			"Env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
		"rootfs":  map[string]interface{}{"type": "layers", "diff_ids": []string{layerDigest}},
		"history": []interface{}{map[string]interface{}{"created": epoch.Format(time.RFC3339), "created_by": "testcluster"}},
	})
	if err != nil {
		return err
	}
	configDigest := digest(config)
	manifest, err := json.Marshal(map[string]interface{}{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]interface{}{"mediaType": "application/vnd.oci.image.config.v1+json",
			"digest": configDigest, "size": len(config)},
		"layers": []interface{}{map[string]interface{}{"mediaType": "application/vnd.oci.image.layer.v1.tar",
			"digest": layerDigest, "size": layer.Len()}},
	})
	if err != nil {
		return err
	}
	manifestDigest := digest(manifest)
	tag := ref[strings.LastIndex(ref, ":")+1:]
	index, err := json.Marshal(map[string]interface{}{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
		"manifests": []interface{}{map[string]interface{}{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifestDigest, "size": len(manifest),
			"annotations": map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag},
		}},
	})
	if err != nil {
		return err
	}
	docker, err := json.Marshal([]interface{}{map[string]interface{}{
		"Config": blob(configDigest), "RepoTags": []string{ref}, "Layers": []string{blob(layerDigest)}}})
	if err != nil {
		return err
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	defer out.Close()
	tw := tar.NewWriter(out)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{blob(layerDigest), layer.Bytes()}, {blob(configDigest), config}, {blob(manifestDigest), manifest},
		{"index.json", index}, {"manifest.json", docker},
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: dir, Mode: 0o755, Typeflag: tar.TypeDir, ModTime: epoch}); err != nil {
			return err
		}
	}
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: epoch,
			Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return out.Close()
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blob(d string) string { return "blobs/sha256/" + strings.TrimPrefix(d, "sha256:") }
