"""Packs a root filesystem directory as a one-layer container image archive, with the image settings the
``Dockerfile`` declares (USER, WORKDIR, ENV, EXPOSE, ENTRYPOINT, CMD): what ``make image`` writes.

The archive is both an OCI image layout (``oci-layout``, ``index.json``, ``blobs/sha256/``) and a docker
archive (``manifest.json`` with ``RepoTags``), the format ``docker save`` writes, so ``docker load``,
``podman load``, ``kind load image-archive`` and ``ctr images import`` all read it.

    python tools/image_archive.py --rootfs DIR --dockerfile Dockerfile --ref NAME:TAG --out FILE
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shlex
import sys
import tarfile
from pathlib import Path

EPOCH = 0  # every timestamp: the archive of the same tree is the same bytes


def dockerfile_settings(text: str) -> dict:
    """The image settings of a Dockerfile's final stage: User, WorkingDir, Env, ExposedPorts, Entrypoint, Cmd
    (the names of the image config, https://github.com/opencontainers/image-spec/blob/main/config.md)."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    settings: dict = {"Env": {}, "ExposedPorts": {}}
    for line in lines:
        word, _, rest = line.partition(" ")
        word, rest = word.upper(), rest.strip()
        if word == "FROM":
            settings = {"Env": {}, "ExposedPorts": {}}
        elif word == "USER":
            settings["User"] = rest
        elif word == "WORKDIR":
            settings["WorkingDir"] = rest
        elif word == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                settings["Env"][key] = value
        elif word == "EXPOSE":
            for port in rest.split():
                settings["ExposedPorts"][port if "/" in port else f"{port}/tcp"] = {}
        elif word in ("ENTRYPOINT", "CMD"):
            settings["Entrypoint" if word == "ENTRYPOINT" else "Cmd"] = json.loads(rest)
    return settings


def normalized(ref: str) -> str:
    """The fully qualified name containerd (and so the kubelet) looks an image up by: docker.io/library/NAME:TAG
    for a bare NAME:TAG, as docker normalizes it."""
    first = ref.split("/", 1)[0]
    if "/" in ref and ("." in first or ":" in first or first == "localhost"):
        return ref
    return f"docker.io/{ref}" if "/" in ref else f"docker.io/library/{ref}"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _blob(digest: str) -> str:
    return "blobs/sha256/" + digest.split(":", 1)[1]


def layer_tar(rootfs: Path, out: io.BufferedIOBase) -> None:
    """The root filesystem as a tar layer: sorted, owned by root, timestamps zeroed, device files left out."""
    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if info.ischr() or info.isblk() or info.isfifo():
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = EPOCH
        return info

    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(rootfs):
            dirnames.sort()
            for name in sorted(dirnames) + sorted(filenames):
                path = Path(dirpath) / name
                arcname = str(path.relative_to(rootfs))
                info = tar.gettarinfo(str(path), arcname)  # None for a socket
                info = clean(info) if info is not None else None
                if info is None:
                    continue
                if info.isreg():
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)


def write_archive(rootfs: Path, settings: dict, ref: str, out: Path) -> dict:
    """Writes the archive; returns its image config."""
    layer_path = out.with_suffix(".layer.tmp")
    with open(layer_path, "wb") as f:
        layer_tar(rootfs, f)
    h = hashlib.sha256()
    with open(layer_path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    layer_digest, layer_size = "sha256:" + h.hexdigest(), layer_path.stat().st_size
    env = [f"{k}={v}" for k, v in settings["Env"].items()]
    if not any(e.startswith("PATH=") for e in env):
        env.insert(0, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    image_config = {k: v for k, v in settings.items() if k not in ("Env",)}
    image_config["Env"] = env
    config = json.dumps({
        "architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z", "config": image_config,
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "make image (tools/image_archive.py)"}],
    }, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": _digest(config),
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest,
                    "size": layer_size}],
    }, sort_keys=True).encode()
    index = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": _digest(manifest),
                       "size": len(manifest),
                       "annotations": {"io.containerd.image.name": normalized(ref),
                                       "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1]}}],
    }, sort_keys=True).encode()
    docker = json.dumps([{"Config": _blob(_digest(config)), "RepoTags": [ref],
                          "Layers": [_blob(layer_digest)]}]).encode()

    def add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), EPOCH, 0o644
        tar.addfile(info, io.BytesIO(data))

    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, EPOCH
            tar.addfile(info)
        info = tar.gettarinfo(str(layer_path), _blob(layer_digest))
        info.mtime, info.uid, info.gid, info.uname, info.gname = EPOCH, 0, 0, "", ""
        with open(layer_path, "rb") as f:
            tar.addfile(info, f)
        add(tar, _blob(_digest(config)), config)
        add(tar, _blob(_digest(manifest)), manifest)
        add(tar, "index.json", index)
        add(tar, "manifest.json", docker)
    layer_path.unlink()
    tmp.replace(out)
    return json.loads(config)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rootfs", type=Path, required=True)
    p.add_argument("--dockerfile", type=Path, required=True)
    p.add_argument("--ref", required=True, help="NAME:TAG (never latest)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if ":" not in args.ref.rsplit("/", 1)[-1] or args.ref.endswith(":latest"):
        p.error(f"--ref {args.ref!r}: needs a tag, and not latest")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_archive(args.rootfs, dockerfile_settings(args.dockerfile.read_text()), args.ref, args.out)
    print(f"{args.out} ({args.out.stat().st_size / 2**20:.0f} MiB): {args.ref}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
