"""LICENSE, CHANGELOG and the README's operating notes agree with the project."""
import configparser
import re

from tests.helpers import REPO


def test_license_file_matches_setup_cfg():
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    assert cfg["metadata"]["license"] == "Apache-2.0"
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_changelog_keeps_a_changelog_and_names_the_current_version():
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    text = (REPO / "CHANGELOG.md").read_text()
    assert "[Keep a Changelog](https://keepachangelog.com/" in text
    headings = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert headings[0] == "Unreleased" and cfg["metadata"]["version"] in headings
    assert "(CHANGELOG.md)" in (REPO / "README.md").read_text()


def test_uninstall_commands_ignore_what_is_gone():
    """The README is a front page (its install steps are in docs/install.md): every `kubectl delete` in it
    and in the docs ignores what is gone already."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    commands = [c for p in pages for c in re.findall(r"`(kubectl delete [^`]+)`", p.read_text())]
    assert any("mutatingwebhookconfiguration" in c for c in commands), commands
    assert all("--ignore-not-found" in c for c in commands), commands


def test_makefile_points_only_at_docs_that_exist():
    makefile = (REPO / "Makefile").read_text()
    paths = set(re.findall(r"[\w./-]+\.md\b", makefile))
    assert "docs/e2e.md" in paths   # the pointer to the end-to-end docs
    assert [p for p in paths if not (REPO / p).exists()] == []
