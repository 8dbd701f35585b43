"""Authentication: every mutating endpoint without a token (401), with a read-only token (403) and with an
admin token (allowed); reads need a token too unless public; the CLI refuses a non-loopback bind without
tokens and warns loudly with --insecure; tokens from a file and from SKETCHQL_TOKENS."""
import pytest

from test_service_helpers import client
from sketchql.service.auth import Auth, TokenConfigError, load_tokens, parse_tokens_env, parse_tokens_text

ADMIN, READ = "admin-token-123", "read-token-456"
H_ADMIN = {"Authorization": f"Bearer {ADMIN}"}
H_READ = {"Authorization": f"Bearer {READ}"}

# (method, path, json body) of every mutating endpoint, with a body that succeeds for an admin
MUTATIONS = [
    ("POST", "/streams", {"sql": "CREATE STREAM T (k INT) TIMESTAMP ts"}),
    ("POST", "/streams/S/batches", {"rows": [{"k": 1, "ts": 1.0}]}),
    ("POST", "/streams/S/heartbeat", {"ts": 2.0}),
    ("POST", "/queries", {"sql": "SELECT k FROM S [RANGE 5]"}),
    ("PATCH", "/queries/1", {"weight": 2.0}),
    ("PATCH", "/queries/1/contract", {"error": 0.1}),
    ("PATCH", "/engine/budgets", {"memory_bytes": 10_000_000}),
    ("PATCH", "/control/stream/S", {"allowed_lateness": 1.0}),
    ("POST", "/summaries/load", {"path": "/nonexistent/x.sqs"}),
    ("DELETE", "/summaries/nothing", None),
    ("POST", "/admin/checkpoint", None),
    ("DELETE", "/queries/1", None),
]
READS = ["/", "/streams", "/streams/S", "/queries", "/queries/1", "/queries/1/results", "/queries/1/contract",
         "/queries/1/precision", "/queries/1/plan", "/engine/budgets", "/allocator", "/control", "/metrics",
         "/limits", "/summaries", "/durability"]


@pytest.fixture()
def c():
    cl = client(auth=Auth({ADMIN: "admin", READ: "read"}))
    cl.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts"}, headers=H_ADMIN)
    cl.post("/queries", json={"sql": "SELECT k FROM S [RANGE 10]"}, headers=H_ADMIN)
    return cl


@pytest.mark.parametrize("method,path,body", MUTATIONS)
def test_each_mutation_needs_the_admin_role(c, method, path, body):
    kw = {"json": body} if body is not None else {}
    r = c.request(method, path, **kw)
    assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"
    assert r.headers["www-authenticate"] == "Bearer"
    r = c.request(method, path, headers={"Authorization": "Bearer wrong-token-000"}, **kw)
    assert r.status_code == 401
    r = c.request(method, path, headers=H_READ, **kw)
    assert r.status_code == 403 and r.json()["error"]["needs_role"] == "admin"
    r = c.request(method, path, headers=H_ADMIN, **kw)
    assert r.status_code < 500, r.text
    if r.status_code >= 400:                       # refused for its content (e.g. no summary roots), not its role
        assert r.json()["error"]["type"] not in ("unauthorized", "forbidden"), r.text


def test_refused_mutations_change_nothing(c):
    before = c.get("/streams/S", headers=H_READ).json()["stats"]["tuples_in"]
    assert c.post("/streams/S/batches", json={"rows": [{"k": 1, "ts": 1.0}]}, headers=H_READ).status_code == 403
    assert c.get("/streams/S", headers=H_READ).json()["stats"]["tuples_in"] == before
    assert c.delete("/queries/1").status_code == 401
    assert [q["id"] for q in c.get("/queries", headers=H_READ).json()["queries"]] == [1]


@pytest.mark.parametrize("path", READS)
def test_reads_need_a_read_token(c, path):
    assert c.get(path).status_code == 401
    assert c.get(path, headers=H_READ).status_code == 200
    assert c.get(path, headers=H_ADMIN).status_code == 200


def test_explain_is_a_read(c):
    body = {"sql": "SELECT k FROM S [RANGE 5]"}
    assert c.post("/explain", json=body).status_code == 401
    assert c.post("/explain", json=body, headers=H_READ).status_code == 200


def test_open_paths_and_query_token(c):
    assert c.get("/health").status_code == 200
    assert c.get("/docs").status_code == 200 and c.get("/openapi.json").status_code == 200
    assert c.get("/queries", params={"access_token": READ}).status_code == 200      # EventSource-style
    r = c.post("/queries", params={"access_token": ADMIN}, json={"sql": "SELECT k FROM S [NOW]"})
    assert r.status_code == 401                                                     # never for mutations
    # the counters see the refusals
    assert 'sketchql_auth_refused_total{status="401"}' in c.get("/metrics", headers=H_READ).text


def test_public_read():
    cl = client(auth=Auth({ADMIN: "admin"}, public_read=True))
    assert cl.get("/streams").status_code == 200
    assert cl.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts"}).status_code == 401


def test_no_tokens_no_checks():
    cl = client()
    assert cl.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts"}).status_code == 201


def test_token_sources(tmp_path):
    f = tmp_path / "tokens"
    f.write_text("# who\nadmin  aaaaaaaaaa\nread bbbbbbbbbb  # viewer\n")
    toks = load_tokens(str(f), env={"SKETCHQL_TOKENS": "read:cccccccccc"}, admin_tokens=["dddddddddd"])
    assert toks == {"aaaaaaaaaa": "admin", "bbbbbbbbbb": "read", "cccccccccc": "read", "dddddddddd": "admin"}
    with pytest.raises(TokenConfigError, match="line 1"):
        parse_tokens_text("root xxxxxxxxxx")
    with pytest.raises(TokenConfigError, match="at least 8"):
        parse_tokens_env("admin:short")
    with pytest.raises(TokenConfigError, match="cannot read"):
        load_tokens(str(tmp_path / "missing"), env={})


def test_cli_refuses_non_loopback_without_tokens(capsys, monkeypatch):
    import uvicorn

    from sketchql.cli import main

    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: calls.append(k))
    monkeypatch.delenv("SKETCHQL_TOKENS", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--in-memory", "--no-demo"]) == 2
    assert "refusing to listen on 0.0.0.0" in capsys.readouterr().err and not calls
    assert main(["serve", "--host", "0.0.0.0", "--in-memory", "--no-demo", "--insecure"]) == 0
    err = capsys.readouterr().err
    assert "WITHOUT AUTHENTICATION" in err and calls[-1]["host"] == "0.0.0.0"      # uvicorn.run stubbed: no bind
    assert main(["serve", "--host", "0.0.0.0", "--in-memory", "--no-demo", "--token", "tttttttttt"]) == 0
    assert "WITHOUT AUTHENTICATION" not in capsys.readouterr().err
