"""``python -m webhook``'s settings, declared once in webhook/options.py: the flags, the environment variables, the
server's own defaults, the Helm chart and the manifests all agree with the declarations."""
from __future__ import annotations

import argparse
import dataclasses
import logging
import shutil
import subprocess
import sys

import pytest
import yaml

from policylib.cli.common import EXIT_ERROR, EXIT_OK
from webhook import __main__ as webhook_main
from webhook import options
from webhook.options import Option, SettingError

from .helmtool import by_kind_name, render
from .helpers import REPO

COMMANDS = {command.NAME: command for command in webhook_main.COMMANDS}
REQUIRED = {"serve": ["--cert-dir", "c"], "run-local": ["--cert-dir", "c"], "certs": ["--out", "o"], "controller": []}


def parse(argv: list[str]) -> argparse.Namespace:
    return webhook_main.parser().parse_args(argv)


def settings(command: str, argv: list[str] = (), environ: dict | None = None) -> dict:
    args = parse([command, *REQUIRED[command], *argv])
    return options.values(COMMANDS[command].OPTIONS, args, environ or {})


def test_every_command_is_a_command_registered_once():
    assert [c.NAME for c in webhook_main.COMMANDS] == ["certs", "serve", "controller", "run-local"]
    for command in webhook_main.COMMANDS:
        assert all(callable(getattr(command, name)) for name in ("add_parser", "run")), command
        assert parse([command.NAME, *REQUIRED[command.NAME]]).func == command.run
        flags = [o.flag for o in command.OPTIONS]
        assert len(flags) == len(set(flags)), command.NAME
        assert set(command.EXIT_STATUS) == {EXIT_OK, EXIT_ERROR}
    assert (webhook_main.EXIT_OK, webhook_main.EXIT_ERROR) == (EXIT_OK, EXIT_ERROR)


def test_the_webhooks_processes_do_not_import_the_cli():
    """The commands have the CLI's shape without its import: the server's workers and the controller load only
    what they run."""
    run = subprocess.run([sys.executable, "-c", "import sys, webhook.__main__; print('policylib.cli' in sys.modules)"],
                         capture_output=True, text=True, check=True, timeout=120)
    assert run.stdout == "False\n"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_flag_not_given_is_its_declared_default(command):
    required = dict(zip(REQUIRED[command][::2], REQUIRED[command][1::2], strict=True))
    expected = {o.dest: required.get(o.flag, False if o.switch else o.default) for o in COMMANDS[command].OPTIONS}
    assert settings(command) == expected


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_flag_given_sets_its_setting(command):
    assert len(COMMANDS[command].OPTIONS) >= 9
    for option in COMMANDS[command].OPTIONS:
        if option.switch:
            assert settings(command, [option.flag])[option.dest] is True
        elif not option.required:
            value = option.choices[-1] if option.choices else "7"
            expected = option.type(value) if option.type else value
            assert settings(command, [f"{option.flag}={value}"])[option.dest] == expected, option.flag


def test_run_local_listens_on_this_machine_with_one_worker_and_serve_on_every_address_with_two():
    assert (settings("run-local")["host"], settings("run-local")["workers"]) == ("127.0.0.1", 1)
    assert (settings("serve")["host"], settings("serve")["workers"]) == ("0.0.0.0", 2)


ENVIRONMENT = [(o, command) for command in ("serve", "run-local", "controller") for o in COMMANDS[command].OPTIONS
               if o.env]


def test_the_environment_variables_are_the_published_ones():
    assert {(command, o.flag, o.env) for o, command in ENVIRONMENT} == {
        (c, flag, env) for c in ("serve", "run-local") for flag, env in (
            ("--first-request-timeout", "POLICYLIB_WEBHOOK_FIRST_REQUEST_TIMEOUT"),
            ("--tls-min-version", "POLICYLIB_WEBHOOK_TLS_MIN_VERSION"),
            ("--client-ca", "POLICYLIB_WEBHOOK_CLIENT_CA"))} | {("controller", "--namespace", "POD_NAMESPACE")}


@pytest.mark.parametrize("flag, env, flag_value, env_value, expected_from_env", [
    ("--first-request-timeout", "POLICYLIB_WEBHOOK_FIRST_REQUEST_TIMEOUT", "2", "9", 9.0),
    ("--tls-min-version", "POLICYLIB_WEBHOOK_TLS_MIN_VERSION", "1.2", "1.3", "1.3"),
    ("--client-ca", "POLICYLIB_WEBHOOK_CLIENT_CA", "/a/ca.crt", "/b/ca.crt", "/b/ca.crt"),
])
def test_the_flag_wins_over_its_environment_variable_which_wins_over_the_default(flag, env, flag_value, env_value,
                                                                                expected_from_env):
    dest = flag[2:].replace("-", "_")
    assert settings("serve", [], {env: env_value})[dest] == expected_from_env
    given = settings("serve", [f"{flag}={flag_value}"], {env: env_value})[dest]
    assert given == (float(flag_value) if dest == "first_request_timeout" else flag_value)
    assert settings("serve", [], {env: ""})[dest] == next(o.default for o in options.SERVE if o.flag == flag)


def test_the_controllers_namespace_is_the_flag_else_pod_namespace_else_the_install_namespace():
    assert settings("controller")["namespace"] == "policylib-system"
    assert settings("controller", [], {"POD_NAMESPACE": "team"})["namespace"] == "team"
    assert settings("controller", ["--namespace", "mine"], {"POD_NAMESPACE": "team"})["namespace"] == "mine"


@pytest.mark.parametrize("env, value, message", [
    ("POLICYLIB_WEBHOOK_TLS_MIN_VERSION", "1.1", "POLICYLIB_WEBHOOK_TLS_MIN_VERSION: must be 1.2 or 1.3, got '1.1'"),
    ("POLICYLIB_WEBHOOK_FIRST_REQUEST_TIMEOUT", "0",
     "POLICYLIB_WEBHOOK_FIRST_REQUEST_TIMEOUT: must be a positive number of seconds, got '0'"),
])
def test_a_bad_environment_variable_is_an_error_naming_it(env, value, message):
    with pytest.raises(SettingError) as e:
        settings("serve", [], {env: value})
    assert str(e.value) == message


def test_threads_is_accepted_has_no_effect_and_warns_when_given(caplog):
    serve = COMMANDS["serve"]
    with caplog.at_level(logging.WARNING, logger="webhook.__main__"):
        given = serve.settings(parse(["serve", "--cert-dir", "c", "--threads", "8"]))
    assert [(r.getMessage(), r.flag) for r in caplog.records] == [("flag has no effect", "--threads")]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="webhook.__main__"):
        not_given = serve.settings(parse(["serve", "--cert-dir", "c"]))
    assert caplog.records == []
    assert webhook_main.serve_options(given) == webhook_main.serve_options(not_given)


def test_the_servers_own_defaults_are_the_declared_ones():
    """``ServeOptions`` (the server's settings as the server takes them) defaults each field to its flag's."""
    from webhook.admission.server import ServeOptions
    declared = {o.dest: o.default for o in options.SERVE if not o.required and not o.no_effect}
    own = {f.name: f.default for f in dataclasses.fields(ServeOptions) if f.name in declared}
    assert own == {k: (False if k == "reuse_port" else v) for k, v in declared.items()}


def test_the_certificate_rotators_own_defaults_are_the_declared_ones():
    """The rotator's ``Settings`` (what ``--certificates self`` makes from the flags) default to the flags' values."""
    from webhook.controller.certplan import Settings, parse_duration
    controller = declared("controller")
    own = {f.name: f.default for f in dataclasses.fields(Settings)}
    assert own == {"namespace": controller["--namespace"].default,
                   "service": controller["--certificates-service"].default,
                   "webhook_configuration": controller["--certificates-webhook-configuration"].default,
                   "ca_secret": controller["--certificates-ca-secret"].default,
                   "tls_secret": controller["--certificates-tls-secret"].default,
                   "ca_seconds": parse_duration(controller["--certificates-ca-duration"].default),
                   "serving_seconds": parse_duration(controller["--certificates-serving-duration"].default),
                   "propagation_seconds": parse_duration(controller["--certificates-propagation"].default)}


def test_certificates_self_makes_the_rotators_settings_from_the_flags():
    s = settings("controller", ["--certificates=self", "--certificates-ca-duration=1000d",
                                "--certificates-serving-duration=30d", "--certificates-propagation=1m"],
                 {"POD_NAMESPACE": "team"})
    rotator = webhook_main.certificate_settings(s)
    assert (rotator.namespace, rotator.ca_seconds, rotator.serving_seconds, rotator.propagation_seconds) == (
        "team", 1000 * 86400, 30 * 86400, 60)
    assert webhook_main.certificate_settings(settings("controller")) is None


# --- the chart and the manifests pass the declared values -------------------------------------------------

def container(objects: list[dict], deployment: str) -> dict:
    (one,) = by_kind_name(objects)[("Deployment", deployment)]["spec"]["template"]["spec"]["containers"]
    return one


def container_args(objects: list[dict], deployment: str) -> list[str]:
    return container(objects, deployment)["args"]


def assert_ports_are_the_flags(objects: list[dict], command: str) -> None:
    """The container's port (and the Prometheus scrape annotation) is the port its ``--port`` flag listens on."""
    port = int(given_flags(container_args(objects, DEPLOYMENT[command]))["--port"])
    pod = by_kind_name(objects)[("Deployment", DEPLOYMENT[command])]["spec"]["template"]
    assert [p["containerPort"] for p in container(objects, DEPLOYMENT[command])["ports"]] == [port]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(port)


def given_flags(args: list[str]) -> dict[str, str]:
    """``--flag=value`` of a container's args (every arg after the command is written so)."""
    return dict(arg.split("=", 1) for arg in args[1:])


def declared(command: str) -> dict[str, Option]:
    return {o.flag: o for o in COMMANDS[command].OPTIONS}


def value_at(values: dict, path: str):
    for key in path.split("."):
        values = values[key]
    return values


def nested(path: str, value) -> dict:
    out: dict = value
    for key in reversed(path.split(".")):
        out = {key: out}
    return out


CHART_VALUES = yaml.safe_load((REPO / "charts/policylib/values.yaml").read_text())
CHART_OPTIONS = [(command, o) for command in ("serve", "controller") for o in COMMANDS[command].OPTIONS if o.chart]
DEPLOYMENT = {"serve": "policylib-webhook", "controller": "policylib-controller"}
#: Flags the chart and the manifests give a path of the container's own (a mounted file or directory).
PATHS = {"--config", "--cert-dir", "--client-ca"}


def test_the_chart_values_are_the_published_ones():
    assert {(c, o.flag, o.chart) for c, o in CHART_OPTIONS} == {
        ("serve", "--workers", "webhook.workers"), ("serve", "--max-connections", "webhook.maxConnections"),
        ("serve", "--first-request-timeout", "webhook.firstRequestTimeoutSeconds"),
        ("serve", "--tls-min-version", "webhook.tls.minVersion"),
        ("controller", "--certificates-ca-duration", "certificates.self.caDuration"),
        ("controller", "--certificates-serving-duration", "certificates.self.servingDuration"),
        ("controller", "--certificates-propagation", "certificates.self.propagation")}


@pytest.mark.parametrize("command, option", CHART_OPTIONS, ids=lambda x: getattr(x, "flag", x))
def test_each_chart_value_defaults_to_its_flags_default(command, option):
    value = value_at(CHART_VALUES, option.chart)
    assert (option.type or str)(str(value)) == option.default


@pytest.mark.parametrize("command", ["serve", "controller"])
def test_the_chart_passes_each_flag_its_value_and_by_default_the_declared_default(command):
    objects = render()
    assert_ports_are_the_flags(objects, command)
    flags = given_flags(container_args(objects, DEPLOYMENT[command]))
    options_of = declared(command)
    assert set(flags) <= set(options_of), "the chart passes a flag the command does not declare"
    for flag, text in flags.items():
        option = options_of[flag]
        if flag not in PATHS and flag != "--certificates":
            assert (option.type or str)(text) == option.default, flag
    changed: dict = {}
    for c, option in CHART_OPTIONS:
        if c == command:
            other = "1.3" if option.choices else (7 if option.type else "999h")
            changed = merge(changed, nested(option.chart, other))
    flags = given_flags(container_args(render(changed), DEPLOYMENT[command]))
    for c, option in CHART_OPTIONS:
        if c == command:
            assert flags[option.flag] == str(value_at(changed, option.chart)), option.flag


def merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for key, value in b.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed: `kubectl kustomize` renders "
                    "the manifests")
@pytest.mark.parametrize("command", ["serve", "controller"])
def test_the_manifests_pass_the_declared_defaults(command):
    out = subprocess.run(["kubectl", "kustomize", str(REPO / "manifests")], capture_output=True, text=True,
                         check=True, timeout=120)
    objects = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert_ports_are_the_flags(objects, command)
    flags = given_flags(container_args(objects, DEPLOYMENT[command]))
    options_of = declared(command)
    assert flags and set(flags) <= set(options_of)
    for flag, text in flags.items():
        if flag not in PATHS:
            assert (options_of[flag].type or str)(text) == options_of[flag].default, flag
