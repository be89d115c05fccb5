"""Upload the dashboards in ``dashboards/*.json`` to a running Grafana (grafana-client).

Idempotent: the folder is looked up by title (``GET /api/search?type=dash-folder``) and created
only when missing (``POST /api/folders``); each dashboard is saved by its ``uid`` with
``overwrite`` (``POST /api/dashboards/db``), so pushing twice updates the same dashboards and
never creates duplicates. A 401/403 from Grafana becomes :class:`GrafanaAuthError` naming the
token setting; any other failure becomes :class:`GrafanaPushError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grafana_client import GrafanaApi
from grafana_client.client import GrafanaClientError, GrafanaException, GrafanaUnauthorizedError
from niquests.exceptions import RequestException

from monitor.core.errors import ConfigError, GrafanaAuthError, GrafanaPushError

#: Where the dashboards live: the repository's (or the image's) ``dashboards/`` directory.
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "dashboards"


@dataclass(frozen=True)
class PushResult:
    """What one push did: the folder (created or found) and each dashboard's uid and URL."""

    folder_uid: str
    folder_created: bool
    dashboards: tuple[tuple[str, str, int], ...]  # (uid, url, version)


def load_dashboards(directory: Path = DEFAULT_DIR) -> list[dict[str, Any]]:
    """Every ``*.json`` dashboard in ``directory`` (sorted by file name).

    Raises ConfigError when the directory has none or a file is not a dashboard with a uid.
    """
    files = sorted(directory.glob("*.json"))
    if not files:
        raise ConfigError(f"{directory}: no dashboard JSON files")
    out = []
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: not a readable JSON file: {exc}") from None
        if not isinstance(data, dict) or not data.get("uid") or "panels" not in data:
            raise ConfigError(f"{path}: not a Grafana dashboard with a uid")
        out.append(data)
    return out


def client(url: str, token: str | None, timeout: float = 10.0) -> GrafanaApi:
    """A grafana-client API for ``url`` (http(s)://host[:port][/prefix]) with a bearer token."""
    if not token:
        raise GrafanaAuthError(
            "no Grafana token: set MONITOR_GRAFANA_TOKEN to a service-account token with the "
            "Editor role"
        )
    return GrafanaApi.from_url(url, credential=token, timeout=timeout)


def _folder(api: GrafanaApi, title: str) -> tuple[str, bool]:
    found = api.search.search_dashboards(query=title, type_="dash-folder")
    for item in found or []:
        if item.get("title") == title and item.get("uid"):
            return str(item["uid"]), False
    created = api.folder.create_folder(title)
    return str(created["uid"]), True


def push(
    api: GrafanaApi,
    dashboards: Sequence[dict[str, Any]],
    folder: str,
    message: str = "monitor dashboards push",
) -> PushResult:
    """Save ``dashboards`` into ``folder`` (created if missing), overwriting by uid.

    Raises GrafanaAuthError on 401/403, GrafanaPushError on any other refusal or I/O error.
    """
    try:
        folder_uid, created = _folder(api, folder)
        done = []
        for dashboard in dashboards:
            body = {k: v for k, v in dashboard.items() if k != "id"}
            answer = api.dashboard.update_dashboard(
                {
                    "dashboard": {**body, "id": None},
                    "folderUid": folder_uid,
                    "overwrite": True,
                    "message": message,
                }
            )
            done.append(
                (
                    str(answer.get("uid", body["uid"])),
                    str(answer.get("url", "")),
                    int(answer.get("version", 0)),
                )
            )
    except GrafanaUnauthorizedError as exc:
        raise GrafanaAuthError(
            f"Grafana refused the token (401 {_detail(exc)}): check MONITOR_GRAFANA_TOKEN"
        ) from None
    except GrafanaClientError as exc:
        if exc.status_code == 403:
            raise GrafanaAuthError(
                f"Grafana denied access (403 {_detail(exc)}): the token needs the Editor role"
            ) from None
        raise GrafanaPushError(f"Grafana refused ({exc.status_code}): {_detail(exc)}") from None
    except GrafanaException as exc:
        raise GrafanaPushError(f"Grafana error ({exc.status_code}): {_detail(exc)}") from None
    except (OSError, RequestException) as exc:
        where = str(getattr(api.client, "url", "") or "the configured URL").removesuffix("/api")
        raise GrafanaPushError(
            f"Grafana unreachable at {where} (MONITOR_GRAFANA_URL or --url): {_reason(exc)}"
        ) from None
    return PushResult(folder_uid, created, tuple(done))


def _reason(exc: BaseException) -> str:
    """The one-line root cause of a connection error (``connection refused``, ``timed out``):
    the innermost OS error's text, else the error's class name. Never the urllib3 repr with
    object addresses."""
    found = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", str(exc))
    if found:
        return found.group(1).strip().rstrip(".").lower()
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror.lower()
        seen = seen.__cause__ or seen.__context__
    return type(exc).__name__


def _detail(exc: GrafanaException) -> str:
    response = exc.response
    if isinstance(response, dict) and response.get("message"):
        return str(response["message"])
    return str(exc.message or response)
