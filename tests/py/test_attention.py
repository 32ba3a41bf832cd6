"""Attention compiled end to end (client/python, codegen/attention.c, codegen/attn.h) against eager:

  * nn.MultiheadAttention with an additive causal attn_mask and a key_padding_mask, and with
    a bool attn_mask; a causal nn.TransformerEncoder; an nn.TransformerDecoderLayer (masked
    self-attention and cross-attention); a GPT-style block on 4-d heads with a tril buffer;
    each is rewritten into the fused kernel (the generated C calls coil_sdpa) and matches
    eager;
  * Llama-style grouped-query attention (repeat_kv) reads k and v shared by each group;
  * rows masked everywhere are NaN where eager's are, and a NaN in v or k at a masked key
    propagates (or not) exactly as in eager;
  * bool masks with a finite fill (HF GPT-2's torch.where with finfo.min, masked_fill with
    -1e4) fuse too, their rows masked everywhere uniform as in eager;
  * bf16: the GPT block converted with .to(bfloat16) stays within 1.5x eager bf16's error;
  * COIL_ATTENTION=0 (the measurement switch) compiles the same graph unfused;
  * the modules, NaN and fill cases again for x86-64-v3 where the machine has more (AVX2's
    f32 path with 16 to 1024 keys runs dnnl_sgemm around an exact softmax), and an additive
    causal mask with a NaN in v at a key most rows mask (0 * NaN is NaN for every row in
    eager).
A private cache directory keeps the user's cache untouched.

Run: COIL=build/coil PYTHONPATH=client/python /usr/bin/python3 tests/py/test_attention.py
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import Tap  # noqa: E402

_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_root, "client", "python"))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

import coil  # noqa: E402
import coil_export  # noqa: E402

COIL = os.environ.get("COIL", os.path.join(_root, "build", "coil"))
TOL = 1e-4
TARGET = "native"


class MHA(torch.nn.Module):
    def __init__(self, d=64, h=4):
        super().__init__()
        self.a = torch.nn.MultiheadAttention(d, h, batch_first=True)

    def forward(self, x, am, kpm):
        return self.a(x, x, x, attn_mask=am, key_padding_mask=kpm, need_weights=False)[0]


class MHABool(torch.nn.Module):
    def __init__(self, d=48, h=3):
        super().__init__()
        self.a = torch.nn.MultiheadAttention(d, h)

    def forward(self, x, am):
        return self.a(x, x, x, attn_mask=am, need_weights=False)[0]


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
        self.e = torch.nn.TransformerEncoder(layer, 2)

    def forward(self, x, mask):
        return self.e(x, mask=mask)


class Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.d = torch.nn.TransformerDecoderLayer(64, 4, 128, batch_first=True)

    def forward(self, x, mem, mask):
        return self.d(x, mem, tgt_mask=mask)


class GPT(torch.nn.Module):
    """nanoGPT's CausalSelfAttention: 4-d heads, the scale after the product, masked_fill
    of a tril buffer."""

    def __init__(self, d=64, h=4, T=40):
        super().__init__()
        self.h = h
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        k = k.view(B, T, self.h, C // self.h).transpose(1, 2)
        q = q.view(B, T, self.h, C // self.h).transpose(1, 2)
        v = v.view(B, T, self.h, C // self.h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (k.size(-1) ** 0.5))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class GPT2(torch.nn.Module):
    """HF GPT-2's attention: torch.where(causal & key padding, scores, finfo.min), the scale
    a division after the product."""

    def __init__(self, d=64, h=4, T=300):
        super().__init__()
        self.h = h
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.register_buffer("bias", torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T))

    def forward(self, x, keep):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        att = torch.matmul(q, k.transpose(-1, -2)) / (v.size(-1) ** 0.5)
        mask_value = torch.full([], torch.finfo(att.dtype).min, dtype=att.dtype)
        att = torch.where(self.bias[:, :, :T, :T] & keep[:, None, None, :], att, mask_value)
        att = torch.softmax(att, dim=-1)
        return torch.matmul(att, v).transpose(1, 2).reshape(B, T, C)


class BertPad(torch.nn.Module):
    """Older BERT-style code: masked_fill of padded keys with -10000."""

    def forward(self, q, k, v, pad):
        s = (q @ k.transpose(-2, -1)) / 4.0
        s = s.masked_fill(pad[:, None, None, :], -10000.0)
        return torch.softmax(s, dim=-1) @ v


class GQA(torch.nn.Module):
    """Llama-style grouped-query attention: hk key/value heads, each shared by h / hk query
    heads through repeat_kv (expand + reshape), an additive mask, softmax in f32."""

    def __init__(self, d=64, h=8, hk=2):
        super().__init__()
        self.h, self.hk, self.dh = h, hk, d // h
        self.wq = torch.nn.Linear(d, d, bias=False)
        self.wk = torch.nn.Linear(d, hk * self.dh, bias=False)
        self.wv = torch.nn.Linear(d, hk * self.dh, bias=False)
        self.wo = torch.nn.Linear(d, d, bias=False)

    @staticmethod
    def repeat_kv(x, n):
        B, H, S, D = x.shape
        return x[:, :, None, :, :].expand(B, H, n, S, D).reshape(B, H * n, S, D)

    def forward(self, x, mask):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.h, self.dh).transpose(1, 2)
        k = self.wk(x).view(B, T, self.hk, self.dh).transpose(1, 2)
        v = self.wv(x).view(B, T, self.hk, self.dh).transpose(1, 2)
        k, v = self.repeat_kv(k, self.h // self.hk), self.repeat_kv(v, self.h // self.hk)
        s = torch.matmul(q, k.transpose(2, 3)) / (self.dh ** 0.5) + mask
        p = torch.softmax(s.float(), dim=-1).type_as(q)
        return self.wo(torch.matmul(p, v).transpose(1, 2).reshape(B, T, -1))


def causal(n):
    return torch.triu(torch.full((n, n), float("-inf")), 1)


def fused_calls(m, ins, tmp, env=None):
    """How many coil_sdpa calls the generated C of m's graph makes."""
    d = tempfile.mkdtemp(dir=tmp)
    coil_export.export(m, ins, d)
    c = os.path.join(d, "model.c")
    r = subprocess.run([COIL, "compile", os.path.join(d, "graph.json"), "--emit-c", c],
                       capture_output=True, text=True, env=dict(os.environ, COIL_CACHE_DIR=os.path.join(d, "cache"),
                                                                **(env or {})))
    if r.returncode:
        return -1
    return open(c).read().count("coil_sdpa(&sa)")


def same_nan_close(want, got):
    """NaN in the same places, the rest within TOL of eager's scale."""
    wn, gn = torch.isnan(want), torch.isnan(got)
    if tuple(want.shape) != tuple(got.shape) or not torch.equal(wn, gn):
        return False, "NaN at %d places, eager %d" % (int(gn.sum()), int(wn.sum()))
    w, g = want[~wn].double(), got[~gn].double()
    if w.numel() == 0:
        return True, "all NaN"
    e = float((w - g).abs().max()) / max(float(w.abs().max()), 1e-12)
    return e <= TOL, "rel err %.2g" % e


def check(t, what, m, ins, cache, tmp, calls=1):
    m = m.eval()
    with torch.no_grad():
        want = m(*ins)
        got = coil.compile(m, ins, threads=2, cache_dir=cache, coil=COIL, target=TARGET)(*ins)
    ok, why = same_nan_close(want, got)
    n = fused_calls(m, ins, tmp)
    t.ok(ok and n >= calls, "%s: %s, %d fused attention call(s)" % (what, why, n), why)


def test_modules(t, cache, tmp):
    torch.manual_seed(0)
    x = torch.randn(2, 10, 64)
    kpm = torch.zeros(2, 10, dtype=torch.bool)
    kpm[1, 7:] = True
    check(t, "MultiheadAttention, attn_mask + key_padding_mask", MHA(), (x, causal(10), kpm), cache, tmp)
    bm = torch.rand(13, 13) > 0.3
    bm[:, 0] = True
    check(t, "MultiheadAttention, bool attn_mask", MHABool(), (torch.randn(13, 3, 48), bm), cache, tmp)
    check(t, "causal TransformerEncoder", Encoder(), (torch.randn(3, 17, 64), causal(17)), cache, tmp)
    check(t, "TransformerDecoderLayer", Decoder(), (torch.randn(2, 9, 64), torch.randn(2, 21, 64), causal(9)),
          cache, tmp, calls=2)
    check(t, "GPT block", GPT(), (torch.randn(2, 33, 64),), cache, tmp)


def test_gqa(t, cache, tmp):
    """Grouped heads: k and v are read shared (the attention runs on [B, Hk, G] batch dims,
    3 in the call), not copied per query head."""
    torch.manual_seed(4)
    for B, T, mask in ((2, 19, causal(19)[None, None]), (1, 70, torch.randn(1, 8, 70, 70))):
        m, ins = GQA().eval(), (torch.randn(B, T, 64), mask)
        check(t, "grouped-query attention, B=%d, mask %s" % (B, list(mask.shape)), m, ins, cache, tmp)
        d = tempfile.mkdtemp(dir=tmp)
        coil_export.export(m, ins, d)
        c = os.path.join(d, "model.c")
        subprocess.run([COIL, "compile", os.path.join(d, "graph.json"), "--emit-c", c], capture_output=True,
                       env=dict(os.environ, COIL_CACHE_DIR=os.path.join(d, "cache")))
        src = open(c).read() if os.path.exists(c) else ""
        t.ok(".nbd = 3}" in src and "sa.ks[2]" not in src,
             "grouped-query attention, B=%d: k/v heads broadcast over the group (3 batch dims, no k stride there)" % B)


def test_nan(t, cache, tmp):
    """Rows masked everywhere and non-finite values at masked keys, as eager has them."""
    torch.manual_seed(1)
    m = MHA().eval()
    x = torch.randn(2, 10, 64)
    kpm = torch.zeros(2, 10, dtype=torch.bool)
    kpm[1, :] = True  # batch 1: every key padded -> NaN rows in eager
    with torch.no_grad():
        want = m(x, causal(10), kpm)
        f = coil.compile(m, (x, causal(10), kpm), threads=2, cache_dir=cache, coil=COIL, target=TARGET)
        got = f(x, causal(10), kpm)
    ok, why = same_nan_close(want, got)
    t.ok(ok and bool(torch.isnan(want).any()), "fully masked rows: %s" % why, why)

    class Raw(torch.nn.Module):
        def forward(self, q, k, v, pad):
            s = (q @ k.transpose(-2, -1)).masked_fill(pad, float("-inf"))
            return torch.softmax(s, dim=-1) @ v

    q, k, v = (torch.randn(2, 3, 300, 16) for _ in range(3))
    pad = torch.zeros(2, 1, 1, 300, dtype=torch.bool)
    pad[:, :, :, 260:] = True  # a whole key block (256..299) is padded
    for what, tensor in (("v", v), ("k", k)):
        q2, k2, v2 = q.clone(), k.clone(), v.clone()
        {"v": v2, "k": k2}[what][0, 1, 280, 3] = float("nan")
        ins = (q2, k2, v2, pad)
        with torch.no_grad():
            want = Raw()(*ins)
            got = coil.compile(Raw(), ins, threads=2, cache_dir=cache, coil=COIL, target=TARGET)(*ins)
        ok, why = same_nan_close(want, got)
        t.ok(ok, "NaN in %s at a masked key: %s (eager: %d NaN)" % (what, why, int(torch.isnan(want).sum())), why)

    class Causal(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.softmax((q @ k.transpose(-2, -1)) * 0.25 + causal(q.shape[-2]), dim=-1) @ v

    q, k, v = (torch.randn(1, 2, 300, 16) for _ in range(3))
    v[0, 1, 250, 3] = float("nan")  # a key the rows before 250 mask
    with torch.no_grad():
        want = Causal()(q, k, v)
        got = coil.compile(Causal(), (q, k, v), threads=2, cache_dir=cache, coil=COIL, target=TARGET)(q, k, v)
    ok, why = same_nan_close(want, got)
    n = fused_calls(Causal(), (q, k, v), tmp)
    t.ok(ok and n == 1 and int(torch.isnan(want).sum()) == 300,
         "causal mask, NaN in v at a key most rows mask: %s (eager: %d NaN), %d fused call(s)" % (
             why, int(torch.isnan(want).sum()), n), why)


def test_fills(t, cache, tmp):
    """Bool masks with a finite fill (torch.where with finfo.min, masked_fill with -1e4) fuse,
    and rows masked everywhere come out uniform over v, as in eager (not NaN)."""
    torch.manual_seed(3)
    keep = torch.ones(2, 300, dtype=torch.bool)
    keep[1, 250:] = False  # batch 1: the second key block (256..299) padded: skipped, exactly
    x = torch.randn(2, 300, 64)
    check(t, "GPT-2 style torch.where(mask, scores, finfo.min)", GPT2(), (x, keep), cache, tmp)
    x[1, 280] = float("nan")  # NaN in v at a padded key: 0 * NaN makes every row of batch 1 NaN in eager
    check(t, "GPT-2 style, NaN at a padded key", GPT2(), (x, keep), cache, tmp)
    q, k, v = torch.randn(3, 2, 20, 16), torch.randn(3, 2, 20, 16), torch.randn(3, 2, 20, 16)
    pad = torch.zeros(3, 20, dtype=torch.bool)
    pad[1, 12:] = True
    pad[2, :] = True  # batch 2: every key padded -> uniform rows in eager
    check(t, "masked_fill(pad, -10000), one batch padded everywhere", BertPad(), (q, k, v, pad), cache, tmp)
    with torch.no_grad():
        want = BertPad()(q, k, v, pad)
    t.ok(bool(torch.allclose(want[2], v[2].mean(dim=1, keepdim=True).expand(2, 20, 16), atol=1e-5)),
         "eager's fully padded rows are the mean of v (the case above is that case)")


def test_bf16(t, cache, tmp):
    torch.manual_seed(2)
    m = GPT().eval()
    x = torch.randn(2, 40, 64)
    with torch.no_grad():
        ref = m(x)
        mb = GPT().eval()
        mb.load_state_dict(m.state_dict())
        mb = mb.to(torch.bfloat16)
        want = mb(x.bfloat16())
        got = coil.compile(mb, (x.bfloat16(),), threads=2, cache_dir=cache, coil=COIL)(x.bfloat16())
    scale = float(ref.abs().max())
    e_got = float((got.double() - ref.double()).abs().max())
    e_eager = float((want.double() - ref.double()).abs().max())
    n = fused_calls(mb, (x.bfloat16(),), tmp)
    t.ok(got.dtype == torch.bfloat16 and e_got <= 1.5 * e_eager + scale / 256 and n == 1,
         "GPT block in bf16: error %.3g against f32 (eager bf16: %.3g), %d fused call(s)" % (e_got, e_eager, n),
         "dtype %s" % got.dtype)


def test_switch(t, cache, tmp):
    m, ins = GPT().eval(), (torch.randn(1, 12, 64),)
    n = fused_calls(m, ins, tmp, env={"COIL_ATTENTION": "0"})
    t.ok(n == 0, "COIL_ATTENTION=0 leaves attention unfused (%d calls)" % n)


def main():
    t = Tap()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        t.run("modules", test_modules, t, cache, tmp)
        t.run("gqa", test_gqa, t, cache, tmp)
        t.run("nan", test_nan, t, cache, tmp)
        t.run("fills", test_fills, t, cache, tmp)
        t.run("bf16", test_bf16, t, cache, tmp)
        t.run("switch", test_switch, t, cache, tmp)
        global TARGET
        with open("/proc/cpuinfo") as f:
            avx512 = " avx512f " in f.read().replace("\n", " ")
        if avx512:  # the native target has 16 lanes: its flash path runs above
            TARGET = "x86-64-v3"
            t.run("modules x86-64-v3", test_modules, t, cache, tmp)
            t.run("nan x86-64-v3", test_nan, t, cache, tmp)
            t.run("fills x86-64-v3", test_fills, t, cache, tmp)
    t.done()


if __name__ == "__main__":
    main()
