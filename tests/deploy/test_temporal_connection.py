"""Temporal connection options for production: namespace, TLS (server CA, mTLS, server name), API key.

The settings are validated when loaded; the worker and every CLI command connect
through `workers.temporal_client.connect`, tested here against the real dev server
(`deploy/up.sh temporal`). The dev server has no TLS, so TLS is tested through a
TLS-terminating proxy in front of it that requires a client certificate: a real
handshake with real certificates (made here with `cryptography`), the gRPC stream
carried unchanged to the dev server.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import ssl
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from adapters.errors import ConfigError
from tests.conftest import REPO_ROOT, TemporalServer
from workers.settings import Settings, load_settings
from workers.temporal_client import TemporalUnreachable, connect, tls_config

# environment variables of the developer's shell (`source $STACK/env.sh`) must not change a test
TEMPORAL_ENV = [
    "JOBMEDIC_CONFIG",
    "JOBMEDIC_TEMPORAL__ADDRESS",
    "JOBMEDIC_TEMPORAL__NAMESPACE",
    "JOBMEDIC_TEMPORAL__API_KEY",
    "JOBMEDIC_TEMPORAL__UI_URL",
]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TEMPORAL_ENV:
        monkeypatch.delenv(name, raising=False)


def settings_from(tmp_path: Path, toml: str) -> Settings:
    path = tmp_path / "jobmedic.toml"
    path.write_text(toml)
    return load_settings(path)


# ------------------------------------------------------------------------------------------ settings


def test_defaults_are_plain_default_namespace(tmp_path: Path) -> None:
    t = settings_from(tmp_path, "").temporal
    assert (t.namespace, t.use_tls(), t.api_key) == ("default", False, None)
    assert tls_config(t) is False


def test_an_api_key_implies_tls_and_is_masked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBMEDIC_TEMPORAL__API_KEY", "sekrit-key-123")
    t = settings_from(tmp_path, '[temporal]\naddress = "x.tmprl.cloud:7233"\nnamespace = "prod.a1b2c"\n').temporal
    assert t.use_tls() and tls_config(t) is True
    assert t.api_key is not None and t.api_key.get_secret_value() == "sekrit-key-123"
    shown = subprocess.run(
        [str(REPO_ROOT / ".venv" / "bin" / "jobmedic"), "--config", str(tmp_path / "jobmedic.toml"), "config", "show"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    assert "sekrit-key-123" not in shown
    assert json.loads(shown)["temporal"]["api_key"] == "**********"


def test_an_api_key_over_plain_text_only_when_asked(tmp_path: Path) -> None:
    t = settings_from(tmp_path, '[temporal]\napi_key = "k"\n[temporal.tls]\nenabled = false\n').temporal
    assert not t.use_tls()


@pytest.mark.parametrize(
    ("toml", "key", "reason"),
    [
        ('[temporal.tls]\ncert_file = "/c.pem"\n', "temporal.tls", "cert_file and key_file go together"),
        ('[temporal.tls]\nkey_file = "/k.pem"\n', "temporal.tls", "cert_file and key_file go together"),
        ('[temporal.tls]\nenabled = false\nca_file = "/ca.pem"\n', "temporal.tls", "enabled is false but TLS files"),
        ('[temporal]\nnamespace = "my namespace"\n', "temporal.namespace", "a Temporal namespace name uses"),
        ('[temporal]\nnamespace = ""\n', "temporal.namespace", "a Temporal namespace name uses"),
        ('[temporal]\napi_key = " "\n', "temporal.api_key", "is empty"),
        ('[temporal.tls]\nca_fil = "/ca.pem"\n', "temporal.tls.ca_fil", "unknown key"),
    ],
)
def test_nonsense_is_refused_naming_the_key(tmp_path: Path, toml: str, key: str, reason: str) -> None:
    with pytest.raises(ConfigError, match="invalid configuration") as refused:
        settings_from(tmp_path, toml)
    (line,) = [line for line in str(refused.value).splitlines() if reason in line]
    assert line.strip().startswith(key)


def test_an_unreadable_tls_file_is_named(tmp_path: Path) -> None:
    t = settings_from(tmp_path, f'[temporal.tls]\nca_file = "{tmp_path}/missing-ca.pem"\n').temporal
    with pytest.raises(ConfigError, match=r"temporal\.tls\.ca_file = .*missing-ca\.pem.*cannot be read"):
        tls_config(t)


# ------------------------------------------------------------------------------- the real dev server


@pytest.mark.temporal
async def test_default_namespace_connects(temporal_server: TemporalServer, tmp_path: Path) -> None:
    s = settings_from(tmp_path, f'[temporal]\naddress = "{temporal_server.address}"\n')
    client = await connect(s)
    assert client.namespace == temporal_server.namespace == "default"


@pytest.mark.temporal
async def test_a_wrong_namespace_names_the_setting(temporal_server: TemporalServer, tmp_path: Path) -> None:
    s = settings_from(tmp_path, f'[temporal]\naddress = "{temporal_server.address}"\nnamespace = "no-such-ns"\n')
    with pytest.raises(ConfigError, match=r"temporal\.namespace = 'no-such-ns': .* has no such namespace"):
        await connect(s)


@pytest.mark.temporal
def test_the_cli_says_so_too(temporal_server: TemporalServer, tmp_path: Path) -> None:
    path = tmp_path / "jobmedic.toml"
    path.write_text(f'[temporal]\naddress = "{temporal_server.address}"\nnamespace = "no-such-ns"\n')
    done = subprocess.run(
        [str(REPO_ROOT / ".venv" / "bin" / "jobmedic"), "--config", str(path), "jobs"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 1
    assert "temporal.namespace = 'no-such-ns'" in done.stderr


@pytest.mark.temporal
async def test_tls_to_a_plain_server_says_what_to_check(temporal_server: TemporalServer, tmp_path: Path) -> None:
    s = settings_from(tmp_path, f'[temporal]\naddress = "{temporal_server.address}"\n[temporal.tls]\nenabled = true\n')
    with pytest.raises(TemporalUnreachable, match=r"check temporal\.tls"):
        await connect(s)


# ------------------------------------------------------------------------------------- TLS, for real


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


SERVER_NAME = "temporal.jobmedic.test"


def _issue(subject: str, *, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None, san: str | None = None,
           client: bool = False) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = dt.datetime.now(dt.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer[0].subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(san)]), critical=False)
    if issuer is not None:
        usage = x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH if client else x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256()), key


def _write(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey, cert_path: Path, key_path: Path) -> None:
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca = _issue("jobmedic test CA", issuer=None)
    server = _issue(SERVER_NAME, issuer=ca, san=SERVER_NAME)
    client = _issue("jobmedic-worker", issuer=ca, client=True)
    _write(*ca, d / "ca.pem", d / "ca.key")
    _write(*server, d / "server.pem", d / "server.key")
    _write(*client, d / "client.pem", d / "client.key")
    return Pki(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem", d / "client.key")


@pytest.fixture
async def mtls_proxy(pki: Pki, temporal_server: TemporalServer) -> AsyncIterator[str]:
    """127.0.0.1:PORT speaking TLS 1.2+ with a client certificate required, forwarding to the dev server."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca))
    ctx.load_cert_chain(str(pki.server_cert), str(pki.server_key))
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.set_alpn_protocols(["h2"])
    host, port = temporal_server.address.rsplit(":", 1)
    tasks: set[asyncio.Task] = set()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        for task in (asyncio.create_task(pipe(reader, up_writer)), asyncio.create_task(pipe(up_reader, writer))):
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
    address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    yield address
    server.close()
    for task in list(tasks):
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _tls_toml(address: str, pki: Pki, *, client_cert: bool = True, server_name: str = SERVER_NAME) -> str:
    lines = [f'[temporal]\naddress = "{address}"\napi_key = "test-api-key"', "[temporal.tls]", f'ca_file = "{pki.ca}"',
             f'server_name = "{server_name}"']
    if client_cert:
        lines += [f'cert_file = "{pki.client_cert}"', f'key_file = "{pki.client_key}"']
    return "\n".join(lines) + "\n"


@pytest.mark.temporal
async def test_mtls_with_a_private_ca_and_server_name(mtls_proxy: str, pki: Pki, tmp_path: Path) -> None:
    client = await connect(settings_from(tmp_path, _tls_toml(mtls_proxy, pki)))
    # a real call through the TLS connection: the dev server answers
    assert (await client.service_client.check_health()) is True


@pytest.mark.temporal
async def test_mtls_without_the_client_certificate_is_refused(mtls_proxy: str, pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(TemporalUnreachable, match=r"check temporal\.tls"):
        await connect(settings_from(tmp_path, _tls_toml(mtls_proxy, pki, client_cert=False)))


@pytest.mark.temporal
async def test_a_server_name_the_certificate_lacks_is_refused(mtls_proxy: str, pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(TemporalUnreachable, match=r"check temporal\.tls"):
        await connect(settings_from(tmp_path, _tls_toml(mtls_proxy, pki, server_name="other.jobmedic.test")))
