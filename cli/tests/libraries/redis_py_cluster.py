"""redis-py's RedisCluster against the cluster a master of which is on port argv[1]: prints
what it observes, with ports replaced by the master's index in slot order and node ids by
"id", so that a real 3-master cluster and `lockkit lua serve --cluster 3` print the same."""

import re
import sys

import redis
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

rc = RedisCluster(host="127.0.0.1", port=int(sys.argv[1]), decode_responses=True)
# The masters in slot order.
seed = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]), decode_responses=True)
ports = [entry[2][1] for entry in sorted(seed.execute_command("CLUSTER SLOTS"))]
assert sorted(ports) == sorted(n.port for n in rc.get_primaries())
index = {p: i for i, p in enumerate(ports)}
print("primaries", len(ports))


def raw(i):
    return redis.Redis(host="127.0.0.1", port=ports[i], decode_responses=True)


def shape(v):
    """A reply with ports and ids made port-independent."""
    if isinstance(v, (list, tuple)):
        return [shape(x) for x in v]
    if isinstance(v, dict):
        return {k: shape(x) for k, x in sorted(v.items())}
    if isinstance(v, int) and v in index:
        return "port%d" % index[v]
    if isinstance(v, str) and len(v) == 40:
        return "id"
    return v


def text(e):
    """An error's text with ports replaced."""
    return re.sub(r"\d{4,5}", lambda m: shape(int(m.group())) if int(m.group()) in index else m.group(), str(e))


for i in range(200):
    rc.set("k:%d" % i, i)
print("get", all(rc.get("k:%d" % i) == str(i) for i in range(200)))
print("owners", sorted({index[rc.get_node_from_key("k:%d" % i).port] for i in range(200)}))
print("keyslot", rc.keyslot("foo"), rc.cluster_keyslot("foo"))
script = "redis.call('set', KEYS[1], ARGV[1]) return redis.call('incr', KEYS[2])"
print("eval", rc.eval(script, 2, "{t}a", "{t}b", "x"), rc.get("{t}a"))
rc.mset_nonatomic({"m:1": "a", "m:2": "b", "m:3": "c"})
print("mget", rc.mget_nonatomic(["m:1", "m:2", "m:3"]))
pipe = rc.pipeline()
for i in range(20):
    pipe.incr("p:%d" % i)
print("pipeline", pipe.execute())

owner = index[rc.get_node_from_key("foo").port]
wrong = raw((owner + 1) % len(ports))
for name, call in [
    ("moved", lambda: wrong.get("foo")),
    ("crossslot", lambda: raw(owner).mset({"foo": 1, "bar": 2})),
    ("eval-crossslot", lambda: raw(owner).eval("return 1", 2, "foo", "bar")),
    ("eval-moved", lambda: wrong.eval("return redis.call('get', KEYS[1])", 1, "foo")),
]:
    try:
        print(name, "answered", call())
    except ResponseError as e:
        print(name, type(e).__name__, text(e))

# A key of the same master as foo, in another slot.
near = next(
    k
    for k in ("k:%d" % i for i in range(200))
    if index[rc.get_node_from_key(k).port] == owner and rc.keyslot(k) != rc.keyslot("foo")
)
for name, keys in [("multi one slot", ["{foo}1", "{foo}2"]), ("multi moved", ["foo", "{foo}a", "bar"]), ("multi crossslot", ["foo", near])]:
    tx = raw(owner).pipeline(transaction=True)
    for k in keys:
        tx.set(k, 1)
    try:
        print(name, tx.execute())
    except ResponseError as e:
        print(name, type(e).__name__, text(e))
    print(name, "after", [raw(owner).exists(k) for k in ("foo", "{foo}a", near)])

r = raw(0)
print("slots", shape(sorted(r.execute_command("CLUSTER SLOTS"))))
print("shards", shape(sorted(r.execute_command("CLUSTER SHARDS"), key=lambda s: s["slots"])))
nodes = r.cluster("NODES")
print("nodes", sorted(shape([(int(k.split(":")[1].split("@")[0]), v["flags"], v["slots"]) for k, v in nodes.items()])))
info = r.cluster("INFO")
print("info", {k: info[k] for k in ["cluster_state", "cluster_slots_assigned", "cluster_slots_ok", "cluster_known_nodes", "cluster_size"]})
print("info cluster", r.info("cluster"))
print("myid", shape(r.cluster("MYID")))
print("hello mode", dict(zip(*[iter(r.execute_command("HELLO", "2"))] * 2)).get("mode"))
