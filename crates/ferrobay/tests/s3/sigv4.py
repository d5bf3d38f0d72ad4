"""A small SigV4 signer and raw HTTP/1.1 sender, to send what SDKs never send:
truncated and malformed bodies, bad chunk signatures, oversized headers."""

import datetime
import hashlib
import hmac
import os
import socket
import urllib.parse

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def _hmac(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


class Signer:
    def __init__(self, access=None, secret=None, region=None):
        self.access = access or os.environ["S3_ACCESS_KEY"]
        self.secret = secret or os.environ["S3_SECRET_KEY"]
        self.region = region or os.environ.get("S3_REGION", "us-east-1")
        ep = urllib.parse.urlparse(os.environ["S3_ENDPOINT"])
        self.host, self.port = ep.hostname, ep.port

    def key(self, date):
        k = _hmac(("AWS4" + self.secret).encode(), date)
        k = _hmac(k, self.region)
        k = _hmac(k, "s3")
        return _hmac(k, "aws4_request")

    def sign(self, method, path, query="", headers=None, payload_hash=EMPTY_SHA256, now=None):
        """Returns the headers to send (Host, X-Amz-Date, X-Amz-Content-SHA256,
        Authorization added) and the seed signature."""
        now = now or datetime.datetime.now(datetime.timezone.utc)
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        date = amz_date[:8]
        h = {k.lower(): str(v).strip() for k, v in (headers or {}).items()}
        h["host"] = f"{self.host}:{self.port}"
        h["x-amz-date"] = amz_date
        h["x-amz-content-sha256"] = payload_hash
        signed = sorted(h)
        canon_query = "&".join(
            f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
            for k, v in sorted(urllib.parse.parse_qsl(query, keep_blank_values=True))
        )
        canonical = "\n".join([
            method,
            urllib.parse.quote(path, safe="/-_.~"),
            canon_query,
            "".join(f"{k}:{h[k]}\n" for k in signed),
            ";".join(signed),
            payload_hash,
        ])
        scope = f"{date}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        sig = hmac.new(self.key(date), to_sign.encode(), hashlib.sha256).hexdigest()
        h["authorization"] = f"AWS4-HMAC-SHA256 Credential={self.access}/{scope}, SignedHeaders={';'.join(signed)}, Signature={sig}"
        return h, sig, amz_date, scope

    def chunk_signature(self, prev_sig, amz_date, scope, chunk):
        to_sign = "\n".join([
            "AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, prev_sig, EMPTY_SHA256, hashlib.sha256(chunk).hexdigest(),
        ])
        return hmac.new(self.key(amz_date[:8]), to_sign.encode(), hashlib.sha256).hexdigest()


def send(method, path, query, headers, body, content_length=None, close_after_body=False):
    """Sends one request on a fresh connection; returns (status, headers, body).
    content_length may differ from len(body) to send a truncated body."""
    s = Signer()
    target = urllib.parse.quote(path, safe="/-_.~") + (f"?{query}" if query else "")
    cl = len(body) if content_length is None else content_length
    lines = [f"{method} {target} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers.items()]
    if "content-length" not in {k.lower() for k in headers}:
        lines.append(f"Content-Length: {cl}")
    lines.append("Connection: close")
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
    with socket.create_connection((s.host, s.port), timeout=30) as sock:
        sock.sendall(raw)
        if close_after_body:
            sock.shutdown(socket.SHUT_WR)
        resp = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            resp += chunk
    if not resp:
        return None, {}, b""
    head, _, rest = resp.partition(b"\r\n\r\n")
    status_line, *hdrs = head.decode("latin-1").split("\r\n")
    status = int(status_line.split()[1])
    rh = {}
    for line in hdrs:
        k, _, v = line.partition(":")
        rh[k.strip().lower()] = v.strip()
    return status, rh, rest


def error_code(body):
    text = body.decode("utf-8", "replace")
    if "<Code>" not in text:
        return None
    return text.split("<Code>", 1)[1].split("</Code>", 1)[0]


def aws_chunked(payload, chunk_size, signer=None, seed=None, amz_date=None, scope=None, trailer=None, corrupt_chunk=None):
    """Encodes payload as aws-chunked: signed chunks (with signer) or unsigned,
    optionally followed by a trailer header line."""
    out = b""
    prev = seed
    chunks = [payload[i:i + chunk_size] for i in range(0, len(payload), chunk_size)] + [b""]
    for n, c in enumerate(chunks):
        if signer:
            sig = signer.chunk_signature(prev, amz_date, scope, c)
            if corrupt_chunk == n:
                sig = ("0" if sig[0] != "0" else "1") + sig[1:]
            prev = sig
            out += f"{len(c):x};chunk-signature={sig}\r\n".encode() + c + b"\r\n"
        elif c or trailer is None:
            out += f"{len(c):x}\r\n".encode() + c + b"\r\n"
        else:
            out += b"0\r\n"
    if trailer:
        out += trailer.encode() + b"\r\n\r\n"
    return out
