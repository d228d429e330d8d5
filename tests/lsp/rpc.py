"""The JSON-RPC side of the scripted LSP clients (lsp_test.py,
lsp_features_test.py): `sflowc --lsp` as a child process, messages framed
with Content-Length as LSP 3.17 frames them."""
import json
import subprocess


class Rpc:
    def __init__(self, sflowc, env=None):
        self.p = subprocess.Popen([sflowc, "--lsp"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, env=env)
        self.next_id = 1

    def send_raw(self, data):
        self.p.stdin.write(data)
        self.p.stdin.flush()

    def send(self, method, params=None, request=True):
        """Sends a request (returning its id) or a notification."""
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        if request:
            msg["id"] = self.next_id
            self.next_id += 1
        body = json.dumps(msg).encode()
        self.send_raw(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return msg.get("id")

    def read(self):
        """The next message from the server."""
        headers = {}
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise EOFError("server closed its output")
            line = line.decode().strip()
            if not line:
                break
            k, v = line.split(":", 1)
            headers[k.lower()] = v.strip()
        return json.loads(self.p.stdout.read(int(headers["content-length"])))
