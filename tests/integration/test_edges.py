"""The gateway at its edges (docs/decisions/0203, 0205): slow clients, too many connections,
cookies outside dev mode and HTTPS. Each test talks to a real gateway process over raw
sockets where the point is a client that misbehaves."""

from __future__ import annotations

import datetime
import json
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway.auth import devices
from gateway.web import session
from tests.conftest import TEST_PASSWORD
from tests.support import stack

DRIBBLE_S = 2.0  # one byte every two seconds, as the outside check did


def _dribble(port: int, head: bytes, rest: bytes, closed_at: dict, key: int) -> None:
    """Send ``head`` at once, then ``rest`` a byte every DRIBBLE_S; note when the server
    closes the connection and what it said."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.settimeout(DRIBBLE_S)
        heard = b""
        try:
            sock.sendall(head)
            for byte in rest:
                sock.sendall(bytes([byte]))
                try:
                    chunk = sock.recv(65536)
                except TimeoutError:
                    continue
                heard += chunk
                if not chunk:
                    break
                # An answer came: read it to the end (the server closes after it)
                sock.settimeout(10)
                while chunk:
                    chunk = sock.recv(65536)
                    heard += chunk
                break
        except (BrokenPipeError, ConnectionResetError):
            pass
        closed_at[key] = (time.monotonic() - start, heard)


def _dribblers(port: int, head: bytes, rest: bytes, count: int) -> dict:
    closed_at: dict = {}
    threads = [threading.Thread(target=_dribble, args=(port, head, rest, closed_at, i))
               for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=40)
    return closed_at


@pytest.fixture
def edged(stack_env, out_dir):
    gateway = stack.start_gateway({**stack_env, "HEADER_TIMEOUT_S": "3",
                                   "BODY_MIN_BYTES_PER_S": "100", "BODY_RATE_WINDOW_S": "2"},
                                  out_dir, name="gateway-edged")
    yield gateway
    gateway.stop()


def test_ten_clients_dribbling_headers_are_answered_408_and_cut_off(edged):
    # Given ten connections sending a request's headers a byte every two seconds
    head = b"GET /health/live HTTP/1.1\r\nHost: x\r\n"
    closed = _dribblers(edged.port, head, b"X-Slow: " + b"a" * 40 + b"\r\n\r\n", count=10)
    # Then the server answers each 408 and closes it soon after the header timeout (3 s),
    # instead of holding it for as long as the client likes
    assert len(closed) == 10
    for took, heard in closed.values():
        assert took < 10, took
        assert heard.startswith(b"HTTP/1.1 408"), heard[:80]
        assert json.loads(heard.split(b"\r\n\r\n", 1)[1])["code"] == "request_timeout"
    # and a client at a normal pace is served meanwhile and after
    assert httpx.get(f"{edged.url}/health/live", timeout=10).status_code == 200


def test_an_upload_dribbling_its_body_is_answered_408_and_nothing_is_kept(edged, tenants, conn,
                                                                          stack_env):
    # Given an upload whose body arrives a byte every two seconds (minimum: 100 bytes/s)
    user = tenants.user(role="user")
    boundary = "b0undary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
            f"filename=\"slow.txt\"\r\nContent-Type: text/plain\r\n\r\n").encode() + b"x" * 60
    head = (f"POST /v1/ingest HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {user.token}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
            f"Content-Length: {len(body) + 100}\r\n\r\n").encode()
    (took, heard), = _dribblers(edged.port, head + body[:10], body[10:], count=1).values()
    # Then the gateway answers 408 within a window or two and closes the connection
    assert heard.startswith(b"HTTP/1.1 408"), heard[:200]
    assert b"request_timeout" in heard and b"connection: close" in heard.lower()
    assert took < 12, took
    # and keeps no run, no document and no file of it
    assert conn.execute("SELECT count(*) AS n FROM ingestion_runs").fetchone()["n"] == 0
    uploads = Path(stack_env["UPLOAD_STORE_URI"].removeprefix("file://"))
    assert not any(p.is_file() for p in uploads.rglob("*"))


def test_a_connection_past_the_cap_is_refused_at_once(stack_env, out_dir):
    # Given a gateway that takes at most 4 connections, already holding 4 idle ones
    gateway = stack.start_gateway({**stack_env, "MAX_CONNECTIONS": "4", "HEADER_TIMEOUT_S": "30"},
                                  out_dir, name="gateway-capped")
    idle = [socket.create_connection(("127.0.0.1", gateway.port), timeout=10) for _ in range(4)]
    try:
        time.sleep(0.5)
        # When one more asks, Then it gets 503 at once rather than a share of the wait
        started = time.monotonic()
        refused = httpx.get(f"{gateway.url}/health/live", timeout=10)
        assert refused.status_code == 503 and time.monotonic() - started < 5
    finally:
        for sock in idle:
            sock.close()
    time.sleep(0.5)
    assert httpx.get(f"{gateway.url}/health/live", timeout=10).status_code == 200
    gateway.stop()


# ── cookies and HTTPS ───────────────────────────────────────────────────────────────────────
def _set_cookies(response: httpx.Response) -> dict[str, str]:
    return {c.split("=", 1)[0]: c for c in response.headers.get_list("set-cookie")}


def _web_sign_in(url: str, user, **client) -> httpx.Response:
    with httpx.Client(base_url=url, timeout=30, follow_redirects=False, **client) as browser:
        form = browser.get("/login")
        token = form.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
        login_cookie = _set_cookies(form)[session.LOGIN_COOKIE].split(";", 1)[0]
        return browser.post("/login", headers={"Cookie": login_cookie}, data={
            "tenant": user.tenant, "email": user.email, "password": TEST_PASSWORD,
            "csrf_token": token})


def _production(stack_env: dict[str, str]) -> dict[str, str]:
    """The test stack's settings with the cookie default left alone (tests set it off)."""
    return {k: v for k, v in stack_env.items() if k != "SESSION_COOKIE_SECURE"}


def test_cookies_are_secure_by_default_outside_dev_mode(stack_env, out_dir, tenants):
    user = tenants.user(role="user")
    gateway = stack.start_gateway(_production(stack_env), out_dir, name="gateway-prod")
    try:
        signed_in = _web_sign_in(gateway.url, user)
        api = httpx.post(f"{gateway.url}/v1/auth/login", timeout=30, json={
            "tenant": user.tenant, "email": user.email, "password": TEST_PASSWORD})
    finally:
        gateway.stop()
    assert signed_in.status_code == 303, signed_in.text
    cookies = {**_set_cookies(signed_in), **_set_cookies(api)}
    for name in (session.COOKIE, devices.COOKIE, session.TENANT_COOKIE):
        assert "; Secure" in cookies[name], cookies[name]
    # Plain http is not HTTPS: no HSTS
    assert "strict-transport-security" not in signed_in.headers


def test_dev_mode_and_the_explicit_opt_out_keep_cookies_usable_over_plain_http(stack_env,
                                                                               out_dir, tenants):
    user = tenants.user(role="user")
    for name, env in (("dev", {**_production(stack_env), "DEV_MODE": "true"}),
                      ("opt-out", stack_env)):
        gateway = stack.start_gateway(env, out_dir, name=f"gateway-{name}")
        try:
            cookie = _set_cookies(_web_sign_in(gateway.url, user))[session.COOKIE]
        finally:
            gateway.stop()
        assert "Secure" not in cookie, (name, cookie)
    assert "SESSION_COOKIE_SECURE=false" in (out_dir / "gateway-opt-out.log").read_text()


def test_hsts_behind_a_proxy_that_says_https_and_not_otherwise(stack_env, out_dir):
    gateway = stack.start_gateway({**stack_env, "TRUSTED_PROXIES": '["127.0.0.1"]'}, out_dir,
                                  name="gateway-proxied")
    try:
        via_https = httpx.get(f"{gateway.url}/health/live", timeout=10,
                              headers={"X-Forwarded-Proto": "https"})
        via_http = httpx.get(f"{gateway.url}/health/live", timeout=10)
    finally:
        gateway.stop()
    assert via_https.headers["strict-transport-security"] == "max-age=31536000"
    assert "strict-transport-security" not in via_http.headers


def test_hsts_and_secure_cookies_when_serving_tls_itself(stack_env, out_dir, tmp_path, tenants):
    cert, key = _self_signed(tmp_path)
    user = tenants.user(role="user")
    gateway = stack.start_gateway({**stack_env, "TLS_CERT_FILE": str(cert),
                                   "TLS_KEY_FILE": str(key)}, out_dir, name="gateway-tls",
                                  scheme="https")
    try:
        live = httpx.get(f"{gateway.url}/health/live", timeout=10, verify=False)
        signed_in = _web_sign_in(gateway.url, user, verify=False)
    finally:
        gateway.stop()
    assert live.headers["strict-transport-security"] == "max-age=31536000"
    # Even with the opt-out: a request over https always gets Secure cookies
    assert "; Secure" in _set_cookies(signed_in)[session.COOKIE]


def _self_signed(folder):  # type: ignore[no-untyped-def]
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path
