"""A real HTTP server on 127.0.0.1 that speaks the Grafana endpoints `dashboards push` uses.

Modelled on Grafana 11's HTTP API:

- ``GET /api/search?type=dash-folder&query=Q``: folders whose title contains Q (case-insensitive).
- ``POST /api/folders`` ``{"title", "uid"?}``: 200 with the folder; 409 when the title exists.
- ``POST /api/dashboards/db`` ``{"dashboard", "folderUid", "overwrite", "message"}``: saves by
  ``dashboard.uid``; an existing uid without ``overwrite`` is 412 (``version-mismatch``); a
  dashboard with a non-null ``id`` that does not exist is 404; answers ``{id, uid, url, status,
  version, slug}``; versions count up per uid.
- Every request needs ``Authorization: Bearer <token>``; otherwise 401 ``{"message": "invalid
  API key"}``.

State (folders, dashboards, the request log) is on the server object, for the tests to inspect.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


class FakeGrafana(ThreadingHTTPServer):
    def __init__(self, token: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.token = token
        self.folders: dict[str, dict[str, Any]] = {}
        self.dashboards: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._ids = 0
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    def __enter__(self) -> FakeGrafana:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(5)


class _Handler(BaseHTTPRequestHandler):
    server: FakeGrafana

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {self.server.token}":
            return True
        self._send(401, {"message": "invalid API key"})
        return False

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        self.server.requests.append(("GET", parts.path))
        if not self._authorized():
            return
        if parts.path != "/api/search":
            self._send(404, {"message": "Not found"})
            return
        q = parse_qs(parts.query)
        query = q.get("query", [""])[0].lower()
        kinds = q.get("type", [])
        with self.server._lock:
            hits: list[dict[str, Any]] = []
            if not kinds or "dash-folder" in kinds:
                hits += [
                    {
                        "id": f["id"],
                        "uid": f["uid"],
                        "title": f["title"],
                        "type": "dash-folder",
                        "url": f["url"],
                    }
                    for f in self.server.folders.values()
                    if query in f["title"].lower()
                ]
            if not kinds or "dash-db" in kinds:
                hits += [
                    {
                        "id": d["id"],
                        "uid": uid,
                        "title": d["dashboard"]["title"],
                        "type": "dash-db",
                        "folderUid": d["folderUid"],
                    }
                    for uid, d in self.server.dashboards.items()
                    if query in d["dashboard"]["title"].lower()
                ]
        self._send(200, hits)

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        self.server.requests.append(("POST", path))
        if not self._authorized():
            return
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        with self.server._lock:
            if path == "/api/folders":
                self._folder(body)
            elif path == "/api/dashboards/db":
                self._dashboard(body)
            else:
                self._send(404, {"message": "Not found"})

    def _folder(self, body: dict[str, Any]) -> None:
        title = body.get("title")
        if not title:
            self._send(400, {"message": "folder title cannot be empty"})
            return
        if any(f["title"] == title for f in self.server.folders.values()):
            self._send(409, {"message": "a folder with the same name already exists"})
            return
        uid = body.get("uid") or f"f{self.server.next_id():08d}"
        folder = {
            "id": self.server.next_id(),
            "uid": uid,
            "title": title,
            "url": f"/dashboards/f/{uid}/",
        }
        self.server.folders[uid] = folder
        self._send(200, folder)

    def _dashboard(self, body: dict[str, Any]) -> None:
        dash = body.get("dashboard") or {}
        uid, folder_uid = dash.get("uid"), body.get("folderUid")
        if not uid or not dash.get("title"):
            self._send(400, {"message": "Dashboard title and uid are required"})
            return
        if folder_uid and folder_uid not in self.server.folders:
            self._send(400, {"message": "folder not found"})
            return
        old = self.server.dashboards.get(uid)
        if dash.get("id") is not None and (old is None or old["id"] != dash["id"]):
            self._send(404, {"message": "Dashboard not found"})
            return
        if old is not None and not body.get("overwrite"):
            self._send(
                412,
                {
                    "message": "The dashboard has been changed by someone else",
                    "status": "version-mismatch",
                },
            )
            return
        version = old["version"] + 1 if old else 1
        ident = old["id"] if old else self.server.next_id()
        slug = re.sub(r"[^a-z0-9]+", "-", dash["title"].lower()).strip("-")
        self.server.dashboards[uid] = {
            "id": ident,
            "version": version,
            "dashboard": dash,
            "folderUid": folder_uid,
            "message": body.get("message"),
        }
        self._send(
            200,
            {
                "id": ident,
                "uid": uid,
                "url": f"/d/{uid}/{slug}",
                "status": "success",
                "version": version,
                "slug": slug,
            },
        )
