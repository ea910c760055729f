"""Servers of an "outside" host for the egress tests, run inside a network
namespace the test made: any of

    --dns NAME=IP[,NAME=IP...]   DNS on UDP/TCP 53: A records, NXDOMAIN else
    --http PORT:TEXT             HTTP: every request answered with TEXT
    --https PORT:TEXT:CERT:KEY   the same over TLS
    --tcp PORT:TEXT              TEXT to every connection, then close

Prints "ready" once every listener is bound.
"""

import socket
import socketserver
import ssl
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def dns_answer(query, records):
    ident, _flags, qdcount = struct.unpack(">HHH", query[:6])
    pos, labels = 12, []
    while query[pos]:
        n = query[pos]
        labels.append(query[pos + 1 : pos + 1 + n].decode("ascii", "replace"))
        pos += 1 + n
    qtype, _qclass = struct.unpack(">HH", query[pos + 1 : pos + 5])
    question = query[12 : pos + 5]
    name = ".".join(labels).lower()
    ip = records.get(name)
    if ip is None:
        return struct.pack(">HHHHHH", ident, 0x8183, qdcount, 0, 0, 0) + question
    if qtype != 1:
        return struct.pack(">HHHHHH", ident, 0x8180, qdcount, 0, 0, 0) + question
    answer = struct.pack(">HHHIH", 0xC00C, 1, 1, 5, 4) + socket.inet_aton(ip)
    return struct.pack(">HHHHHH", ident, 0x8180, qdcount, 1, 0, 0) + question + answer


def serve_dns(records):
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("0.0.0.0", 53))

    def udp_loop():
        while True:
            data, peer = udp.recvfrom(4096)
            try:
                udp.sendto(dns_answer(data, records), peer)
            except Exception as e:  # a malformed query: no answer
                print("dns:", e, file=sys.stderr)

    class Tcp(socketserver.BaseRequestHandler):
        def handle(self):
            head = self.request.recv(2)
            if len(head) < 2:
                return
            (n,) = struct.unpack(">H", head)
            data = b""
            while len(data) < n:
                chunk = self.request.recv(n - len(data))
                if not chunk:
                    return
                data += chunk
            out = dns_answer(data, records)
            self.request.sendall(struct.pack(">H", len(out)) + out)

    tcp = socketserver.ThreadingTCPServer(("0.0.0.0", 53), Tcp)
    threading.Thread(target=udp_loop, daemon=True).start()
    threading.Thread(target=tcp.serve_forever, daemon=True).start()


def http_server(port, text, cert=None, key=None):
    body = text.encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    if cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        # busybox's TLS client offers only ciphers OpenSSL's default
        # security level refuses.
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def tcp_server(port, text):
    class Handler(socketserver.BaseRequestHandler):
        def handle(self):
            self.request.sendall(text.encode() + b"\n")

    server = socketserver.ThreadingTCPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main(args):
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    it = iter(args)
    for flag in it:
        value = next(it)
        if flag == "--dns":
            records = dict(item.split("=", 1) for item in value.split(","))
            serve_dns({k.lower(): v for k, v in records.items()})
        elif flag == "--http":
            port, text = value.split(":", 1)
            http_server(int(port), text)
        elif flag == "--https":
            port, text, cert, key = value.split(":", 3)
            http_server(int(port), text, cert, key)
        elif flag == "--tcp":
            port, text = value.split(":", 1)
            tcp_server(int(port), text)
        else:
            raise SystemExit("unknown flag " + flag)
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1:])
