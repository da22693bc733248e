"""A stand-in for the Hugging Face Hub API on 127.0.0.1: the endpoints huggingface_hub 1.x calls for
``create_repo``, ``create_branch``, ``repo_info`` and ``upload_folder`` (validate-yaml, preupload, commit), and
for downloading public dataset repos with ``hf_hub_download`` / ``snapshot_download`` (dataset info, tree
listing, ``resolve`` HEAD/GET with the X-Repo-Commit and ETag headers the client reads).

It keeps repos in memory as git-like commits (path -> bytes), checks the bearer token on every request,
answers ``preupload`` with uploadMode "regular" (so no LFS/xet transfer is involved) and the stored file's git
blob id as ``oid`` — exactly what the client compares to skip unchanged files — and logs every request.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

REPO = r"(?P<repo>[^/]+/[^/]+)"
REV = r"(?P<rev>[^/?]+)"
ROUTES = [
    ("POST", re.compile(r"^/api/repos/create$"), "create_repo"),
    ("POST", re.compile(r"^/api/validate-yaml$"), "validate_yaml"),
    ("GET", re.compile(rf"^/api/models/{REPO}/revision/{REV}$"), "repo_info"),
    ("GET", re.compile(rf"^/api/models/{REPO}$"), "repo_info"),
    ("POST", re.compile(rf"^/api/models/{REPO}/branch/{REV}$"), "create_branch"),
    ("POST", re.compile(rf"^/api/models/{REPO}/preupload/{REV}$"), "preupload"),
    ("POST", re.compile(rf"^/api/models/{REPO}/commit/{REV}$"), "commit"),
]
# Public dataset repos: readable without a token, as on the Hub.
DATASET_ROUTES = [
    ("GET", re.compile(rf"^/api/datasets/{REPO}/revision/{REV}$"), "dataset_info"),
    ("GET", re.compile(rf"^/api/datasets/{REPO}/tree/{REV}(?:/(?P<path>.+))?$"), "dataset_tree"),
    ("GET", re.compile(rf"^/datasets/{REPO}/resolve/{REV}/(?P<path>.+)$"), "dataset_file"),
    ("HEAD", re.compile(rf"^/datasets/{REPO}/resolve/{REV}/(?P<path>.+)$"), "dataset_file"),
]
# Public model repos (start models fetched by download_model): readable without a token. Tried only for repos
# added with add_model, so the upload routes below keep their own /api/models/... answers.
MODEL_ROUTES = [
    ("GET", re.compile(rf"^/api/models/{REPO}/revision/{REV}$"), "dataset_info"),
    ("GET", re.compile(rf"^/api/models/{REPO}/tree/{REV}(?:/(?P<path>.+))?$"), "dataset_tree"),
    ("GET", re.compile(rf"^/{REPO}/resolve/{REV}/(?P<path>.+)$"), "dataset_file"),
    ("HEAD", re.compile(rf"^/{REPO}/resolve/{REV}/(?P<path>.+)$"), "dataset_file"),
]


def git_blob_id(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


@dataclass
class Repo:
    private: bool
    commits: dict[str, dict] = field(default_factory=dict)  # oid -> {"files", "parent", "message"}
    branches: dict[str, str] = field(default_factory=dict)

    def files(self, rev: str) -> dict[str, bytes]:
        return self.commits[self.branches.get(rev, rev)]["files"]


class FakeHub:
    def __init__(self, token: str):
        self.token = token
        self.repos: dict[str, Repo] = {}
        self.datasets: dict[str, Repo] = {}
        self.models: dict[str, Repo] = {}  # public model repos (add_model)
        self.requests: list[dict] = []  # {"method", "path", "authorized"}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeHub":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ---- state helpers for tests ----
    def add_dataset(self, repo_id: str, files: dict[str, bytes], commit: str | None = None) -> str:
        """A public dataset repo whose ``main`` is one commit holding ``files``; returns the commit id (``commit``
        when given, e.g. the revision a config pins)."""
        oid = (
            commit
            or hashlib.sha1(json.dumps(sorted((p, git_blob_id(c)) for p, c in files.items())).encode()).hexdigest()
        )
        repo = self.datasets.setdefault(repo_id, Repo(private=False))
        repo.commits[oid] = {"files": dict(files), "parent": None, "message": "stand-in data"}
        repo.branches["main"] = oid
        return oid

    def add_model(self, repo_id: str, files: dict[str, bytes], commit: str | None = None) -> str:
        """A public model repo whose ``main`` is one commit holding ``files``; returns the commit id."""
        oid = (
            commit
            or hashlib.sha1(json.dumps(sorted((p, git_blob_id(c)) for p, c in files.items())).encode()).hexdigest()
        )
        repo = self.models.setdefault(repo_id, Repo(private=False))
        repo.commits[oid] = {"files": dict(files), "parent": None, "message": "stand-in model"}
        repo.branches["main"] = oid
        return oid

    def commit(self, repo_id: str, oid: str, files: dict[str, bytes], parent: str | None, message: str) -> None:
        self.repos[repo_id].commits[oid] = {"files": files, "parent": parent, "message": message}

    def head(self, repo_id: str, branch: str = "main") -> str:
        return self.repos[repo_id].branches[branch]

    def n_commits(self, repo_id: str) -> int:
        return len(self.repos[repo_id].commits)

    # ---- request handling ----
    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _reply(self, status: int, body: dict | list | None = None, headers: dict | None = None):
                data = json.dumps(body if body is not None else {}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _dispatch(self, method: str):
                path = urlparse(self.path).path
                authorized = self.headers.get("Authorization") == f"Bearer {hub.token}"
                with hub._lock:
                    hub.requests.append({"method": method, "path": path, "authorized": authorized})
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                for m, pattern, name in DATASET_ROUTES:
                    match = pattern.match(path)
                    if m == method and match:
                        args = {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
                        with hub._lock:
                            return getattr(self, name)(method, **args)
                for m, pattern, name in MODEL_ROUTES:
                    match = pattern.match(path)
                    if m == method and match and unquote(match.group("repo")) in hub.models:
                        args = {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
                        with hub._lock:
                            return getattr(self, name)(method, **args, store=hub.models)
                if not authorized:
                    return self._reply(
                        401, {"error": "Invalid credentials in Authorization header"}, {"X-Error-Code": "Unauthorized"}
                    )
                for m, pattern, name in ROUTES:
                    match = pattern.match(path)
                    if m == method and match:
                        args = {k: unquote(v) for k, v in match.groupdict().items()}
                        with hub._lock:
                            return getattr(self, name)(body, **args)
                return self._reply(404, {"error": f"stand-in hub has no {method} {path}"})

            def do_GET(self):
                self._dispatch("GET")

            def do_POST(self):
                self._dispatch("POST")

            def do_HEAD(self):
                self._dispatch("HEAD")

            # public dataset repos
            def _dataset_commit(self, repo: str, rev: str, store=None) -> str | None:
                r = (hub.datasets if store is None else store).get(repo)
                if r is None:
                    return None
                sha = r.branches.get(rev, rev)
                return sha if sha in r.commits else None

            def _dataset_missing(self, repo: str, rev: str, store=None):
                if repo not in (hub.datasets if store is None else store):
                    return self._reply(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
                return self._reply(404, {"error": f"Invalid rev id: {rev}"}, {"X-Error-Code": "RevisionNotFound"})

            def dataset_info(self, method: str, repo: str, rev: str, store=None):
                store = hub.datasets if store is None else store
                sha = self._dataset_commit(repo, rev, store)
                if sha is None:
                    return self._dataset_missing(repo, rev, store)
                files = store[repo].commits[sha]["files"]
                return self._reply(
                    200,
                    {"id": repo, "sha": sha, "private": False, "siblings": [{"rfilename": f} for f in sorted(files)]},
                )

            def dataset_tree(self, method: str, repo: str, rev: str, path: str = "", store=None):
                store = hub.datasets if store is None else store
                sha = self._dataset_commit(repo, rev, store)
                if sha is None:
                    return self._dataset_missing(repo, rev, store)
                files = store[repo].commits[sha]["files"]
                prefix = path.rstrip("/") + "/" if path else ""
                entries = [
                    {"type": "file", "oid": git_blob_id(c), "size": len(c), "path": p}
                    for p, c in sorted(files.items())
                    if p.startswith(prefix)
                ]
                return self._reply(200, entries)

            def dataset_file(self, method: str, repo: str, rev: str, path: str, store=None):
                store = hub.datasets if store is None else store
                sha = self._dataset_commit(repo, rev, store)
                if sha is None:
                    return self._dataset_missing(repo, rev, store)
                files = store[repo].commits[sha]["files"]
                if path not in files:
                    return self._reply(
                        404, {"error": f"{path} not found"}, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": sha}
                    )
                content = files[path]
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(content)))
                self.send_header("X-Repo-Commit", sha)
                self.send_header("ETag", f'"{git_blob_id(content)}"')
                self.end_headers()
                if method == "GET":
                    self.wfile.write(content)

            def _missing(self, repo: str, rev: str | None = None):
                if repo not in hub.repos:
                    return self._reply(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
                r = hub.repos[repo]
                if rev is not None and rev not in r.branches and rev not in r.commits:
                    return self._reply(404, {"error": f"Invalid rev id: {rev}"}, {"X-Error-Code": "RevisionNotFound"})
                return None

            # endpoints
            def create_repo(self, body: bytes):
                payload = json.loads(body)
                repo_id = (
                    f"{payload['organization']}/{payload['name']}" if payload.get("organization") else payload["name"]
                )
                if repo_id in hub.repos:
                    return self._reply(
                        409, {"error": "You already created this model repo", "url": f"{hub.url}/{repo_id}"}
                    )
                repo = Repo(private=payload.get("visibility") == "private" or bool(payload.get("private")))
                hub.repos[repo_id] = repo
                first = hashlib.sha1(f"{repo_id}:init".encode()).hexdigest()
                hub.commit(
                    repo_id,
                    first,
                    {".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"},
                    None,
                    "initial commit",
                )
                repo.branches["main"] = first
                return self._reply(200, {"url": f"{hub.url}/{repo_id}", "name": repo_id, "id": repo_id})

            def validate_yaml(self, body: bytes):
                return self._reply(200, {"errors": [], "warnings": []})

            def repo_info(self, body: bytes, repo: str, rev: str = "main"):
                if (err := self._missing(repo, rev)) is not None:
                    return err
                r = hub.repos[repo]
                sha = r.branches.get(rev, rev)
                return self._reply(
                    200,
                    {
                        "id": repo,
                        "modelId": repo,
                        "sha": sha,
                        "private": r.private,
                        "siblings": [{"rfilename": f} for f in sorted(r.commits[sha]["files"])],
                    },
                )

            def create_branch(self, body: bytes, repo: str, rev: str):
                if (err := self._missing(repo)) is not None:
                    return err
                r = hub.repos[repo]
                if rev in r.branches:
                    return self._reply(409, {"error": "Reference already exists"})
                start = (json.loads(body) if body else {}).get("startingPoint") or "main"
                r.branches[rev] = r.branches.get(start, start)
                return self._reply(200, {})

            def preupload(self, body: bytes, repo: str, rev: str):
                if (err := self._missing(repo, rev)) is not None:
                    return err
                existing = hub.repos[repo].files(rev)
                files = [
                    {
                        "path": f["path"],
                        "uploadMode": "regular",
                        "shouldIgnore": False,
                        "oid": git_blob_id(existing[f["path"]]) if f["path"] in existing else None,
                    }
                    for f in json.loads(body)["files"]
                ]
                return self._reply(200, {"files": files})

            def commit(self, body: bytes, repo: str, rev: str):
                if (err := self._missing(repo, rev)) is not None:
                    return err
                r = hub.repos[repo]
                parent = r.branches[rev]
                files = dict(r.commits[parent]["files"])
                message = ""
                for line in body.splitlines():
                    item = json.loads(line)
                    if item["key"] == "header":
                        message = item["value"]["summary"]
                    elif item["key"] == "file":
                        files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                    elif item["key"] == "deletedFile":
                        files.pop(item["value"]["path"], None)
                    else:
                        return self._reply(
                            400, {"error": f"stand-in hub accepts regular files only, got {item['key']}"}
                        )
                oid = hashlib.sha1(
                    json.dumps([parent, message, sorted((p, git_blob_id(c)) for p, c in files.items())]).encode()
                ).hexdigest()
                hub.commit(repo, oid, files, parent, message)
                r.branches[rev] = oid
                return self._reply(
                    200, {"commitUrl": f"{hub.url}/{repo}/commit/{oid}", "commitOid": oid, "pullRequestUrl": None}
                )

        return Handler
