"""Server-side cost of release.lua: old (main), new without marker, new with marker.
Each round: N pipelined (SET key tok PX 30000; EVALSHA release) over 1000 keys, then
INFO commandstats -> usec_per_call of evalsha. Rounds interleaved A B C A B C ..."""
import sys, time, redis
port, old_path, new_path, rounds, n = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
r = redis.Redis(port=port)
old = r.script_load(open(old_path).read()); new = r.script_load(open(new_path).read())
variants = {
    'old (main)': lambda p, k: p.evalsha(old, 1, k, 'tok'),
    'new, no marker': lambda p, k: p.evalsha(new, 1, k, 'tok'),
    'new, marker': lambda p, k: p.evalsha(new, 2, k, '{%s}:lockkit-released' % k, 'tok', 21200),
}
res = {v: [] for v in variants}
for _ in range(rounds):
    for name, call in variants.items():
        r.flushall(); r.config_resetstat()
        p = r.pipeline(transaction=False)
        for i in range(n):
            k = 'lock:%d' % (i % 1000)
            p.set(k, 'tok', px=30000); call(p, k)
            if i % 1000 == 999:
                out = p.execute(); assert all(x in (True, 1) for x in out), out[:4]
        p.execute()
        st = r.info('commandstats')['cmdstat_evalsha']
        assert st['calls'] == n
        res[name].append(st['usec_per_call'])
for name, v in res.items():
    v.sort()
    print('%-16s usec_per_call median %.2f  (min %.2f, max %.2f, %d rounds of %d)' % (name, v[len(v)//2], v[0], v[-1], len(v), n))
