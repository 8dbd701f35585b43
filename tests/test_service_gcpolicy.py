"""The server's garbage-collection policy (``sketchql.service.gcpolicy``): survivors of a full
collection are frozen; dropping a query or a stream unfreezes so their cycles can be reclaimed."""
import gc

import pytest

from sketchql.service import gcpolicy


@pytest.fixture
def policy():
    gcpolicy.install()
    try:
        yield
    finally:
        gcpolicy.uninstall()


def test_survivors_of_a_full_collection_are_frozen(policy):
    base = gc.get_freeze_count()
    keep = [[i] for i in range(20_000)]                    # long-lived, tracked
    gc.collect()
    assert gc.get_freeze_count() >= base + 20_000
    assert not any(o is keep for o in gc.get_objects())    # no longer walked by the collector


def test_release_unfreezes_and_cycles_are_reclaimed(policy):
    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a                                # a reference cycle
    gc.collect()                                           # survives: frozen
    import weakref
    w = weakref.ref(a)
    del a, b
    gc.collect()
    assert w() is not None                                 # frozen: the cycle waits
    gcpolicy.release()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert w() is None                                     # reclaimed after the release


def test_dropping_a_query_over_http_releases(policy):
    from fastapi.testclient import TestClient

    from sketchql.service.app import create_app

    c = TestClient(create_app(demo=False))
    c.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts"}).raise_for_status()
    qid = c.post("/queries", json={"sql": "SELECT k FROM S [RANGE 10 SECONDS]"}).json()["id"]
    gc.collect()
    assert gc.get_freeze_count() > 0
    assert c.delete(f"/queries/{qid}").status_code == 200
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gc.get_freeze_count() > 0                       # the survivors frozen again
    c.post("/streams", json={"sql": "DROP STREAM S"}).raise_for_status()
    assert gc.get_freeze_count() == 0
