"""The HTTP contract, against every Python tier as a real server process: each request of
the shared list (qr/contract/cases.json) gets the same status, content type, allow header
and body as from the Node host (qr/node, a real server beside it); PNG answers decode
(zxing-cpp) back to the text sent."""

import signal

import pytest

import harness as h

TIERS = list(h.PY_TIERS)
CASES = h.contract_cases()


@pytest.fixture(scope="module")
def servers(artifacts):
    started = h.start_many(TIERS + ["node"])
    yield started
    for s in started.values():
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


@pytest.fixture(scope="module")
def node_answers(servers):
    return {c["name"]: h.request(servers["node"].base, c["target"], c["method"]) for c in CASES}


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_answers_like_the_node_host(servers, node_answers, tier, case):
    res = h.request(servers[tier].base, case["target"], case["method"])
    node = node_answers[case["name"]]
    assert node.status == case["status"], f"the Node host itself: {node.status} {node.body!r}"
    assert res.status == case["status"], res.body
    assert res.content_type == node.content_type
    assert res.headers.get("allow") == node.headers.get("allow")
    assert int(res.headers["content-length"]) == len(res.body)
    if case["status"] == 200 and "text" in case:
        assert res.content_type == "image/png"
        assert h.decode_qr(res.body) == case["text"]
    else:
        # JSON errors (and /healthz) are the Node host's bytes, message and all.
        assert res.body == node.body
        assert isinstance(res.json(), dict)


@pytest.mark.parametrize("tier", TIERS)
def test_every_sample_text_decodes_back(servers, tier):
    for name, text in h.sample_texts().items():
        res = h.request(servers[tier].base, h.qrcode_target(text))
        assert res.status == 200, f"{name}: {res.body!r}"
        assert res.content_type == "image/png"
        assert h.decode_qr(res.body) == text, name


def test_a_request_head_over_16_kib_is_431_and_the_server_goes_on(servers):
    s = servers["3"]
    res = h.request(s.base, "/qrcode?text=a&pad=" + "p" * (40 * 1024))
    assert res.status == 431
    assert h.request(s.base, "/healthz").status == 200


def test_a_connection_that_sends_no_request_head_is_closed_at_the_head_time_out(artifacts):
    import socket

    s = h.start("3", env={"QR_HEAD_TIMEOUT_MS": "300"})
    try:
        idle = socket.create_connection(("127.0.0.1", s.port), timeout=20)
        idle.sendall(b"GET /qrcode?text=a HTTP/1.1\r\nHost: t\r\n")  # a head that never ends
        assert idle.recv(1) == b"", "the server closed the connection"
        idle.close()
        assert h.request(s.base, "/healthz").status == 200
    finally:
        s.stop()


@pytest.mark.parametrize("tier", TIERS)
def test_exits_0_on_sigterm(servers, tier):
    s = servers.pop(tier)
    assert s.stop(signal.SIGTERM) == 0, s.stderr()


@pytest.mark.parametrize("tier", ["0", "3"])
def test_exits_0_on_sigint(artifacts, tier):
    s = h.start(tier)
    assert h.request(s.base, h.qrcode_target("bye")).status == 200
    assert s.stop(signal.SIGINT) == 0, s.stderr()
