// pow-worker.js - the proof of work before a login code: given a challenge
// of GET /api/pow, find the number n in 0..maxnumber whose SHA-256 of
// salt + n (n in decimal) is the challenge.
//
// A module with two uses. solvePow (api.js) starts it as a module worker
// from this origin (as the pages' Content-Security-Policy requires), so
// the page stays responsive while it searches; there it answers messages:
//   in:  {challenge: {algorithm, challenge, maxnumber, salt, signature}}
//   out: {progress: f}    every 2000 numbers tried: f, the fraction of
//                         0..maxnumber searched so far
//        {number: n}      the answer
//        {failed: "why"}  no number up to maxnumber fits, or the
//                         challenge is not one this page can solve
// Imported anywhere else, it only exports sha256Hex and powSearch, the
// functions the worker runs (the browser test times them on a slowed
// main thread: Chromium slows only a page's main thread, not its workers).
//
// SHA-256 is written out here rather than taken from crypto.subtle, which
// browsers offer only on https and localhost, and whose promise per hash
// would cost more than the hash itself. The inputs are short: the salt
// (about 44 bytes) and a few digits fit one or two 64-byte blocks. The
// salt's whole blocks, and the first rounds of the block where the digits
// start (those whose message words hold only salt bytes), are the same
// for every number, so they are computed once per challenge.

const PROGRESS_EVERY = 2000;

const K = new Int32Array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);

const H0 = new Int32Array([
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c,
    0x1f83d9ab, 0x5be0cd19,
]);

// Rounds from..to-1 of the compression on the working variables v
// (a..h, changed in place) with the message schedule W. Rounds from 16
// on read W[16..63]: extend the schedule first.
function rounds(v, W, from, to) {
    let a = v[0], b = v[1], c = v[2], d = v[3];
    let e = v[4], f = v[5], g = v[6], h = v[7];
    for (let i = from; i < to; i++) {
        const s1 =
            ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
        const t1 = (h + s1 + ((e & f) ^ (~e & g)) + K[i] + W[i]) | 0;
        const s0 =
            ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
        const t2 = (s0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
        h = g;
        g = f;
        f = e;
        e = (d + t1) | 0;
        d = c;
        c = b;
        b = a;
        a = (t1 + t2) | 0;
    }
    v[0] = a; v[1] = b; v[2] = c; v[3] = d;
    v[4] = e; v[5] = f; v[6] = g; v[7] = h;
}

// W[16..63] from the block's words W[0..15].
function extend(W) {
    for (let i = 16; i < 64; i++) {
        const x = W[i - 15], y = W[i - 2];
        const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
        const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
        W[i] = (W[i - 16] + s0 + W[i - 7] + s1) | 0;
    }
}

// The big-endian words of the 64-byte block at bytes[off..] into W[0..15].
function load(W, bytes, off) {
    for (let i = 0; i < 16; i++, off += 4)
        W[i] = (bytes[off] << 24) | (bytes[off + 1] << 16) | (bytes[off + 2] << 8) | bytes[off + 3];
}

// H (the chaining value, changed in place) after the block in W[0..15].
function compress(H, W, v) {
    extend(W);
    v.set(H);
    rounds(v, W, 0, 64);
    for (let i = 0; i < 8; i++) H[i] = (H[i] + v[i]) | 0;
}

// Write SHA-256's padding of a message of len bytes at buf[at..], where
// buf[0..at) holds the message's last bytes after its whole blocks (at
// below 64, or up to 119 when a caller's digits run past the block);
// returns the padded length from buf's start (64 or 128).
function pad(buf, at, len) {
    const end = at + 9 <= 64 ? 64 : 128;
    buf[at] = 0x80;
    buf.fill(0, at + 1, end - 8);
    // The length in bits, big-endian in the last 8 bytes; lengths here
    // stay far below 2^53 bits.
    const bits = len * 8;
    const hi = Math.floor(bits / 0x100000000);
    for (let i = 0; i < 4; i++) {
        buf[end - 8 + i] = (hi >>> (24 - 8 * i)) & 0xff;
        buf[end - 4 + i] = (bits >>> (24 - 8 * i)) & 0xff;
    }
    return end;
}

function hex(H) {
    let s = "";
    for (let i = 0; i < 8; i++) s += (H[i] >>> 0).toString(16).padStart(8, "0");
    return s;
}

// The hex SHA-256 of bytes (a Uint8Array of any length).
function sha256(bytes) {
    const H = H0.slice();
    const W = new Int32Array(64);
    const v = new Int32Array(8);
    const whole = bytes.length - (bytes.length % 64);
    for (let off = 0; off < whole; off += 64) {
        load(W, bytes, off);
        compress(H, W, v);
    }
    const tail = new Uint8Array(128);
    tail.set(bytes.subarray(whole));
    const end = pad(tail, bytes.length - whole, bytes.length);
    for (let off = 0; off < end; off += 64) {
        load(W, tail, off);
        compress(H, W, v);
    }
    return hex(H);
}

// The hex SHA-256 of text's UTF-8 bytes.
export function sha256Hex(text) {
    return sha256(new TextEncoder().encode(text));
}

// The number in 0..maxnumber whose SHA-256 of salt + number (in decimal)
// is target (64 lower-case hex digits), or -1 if there is none.
// progress(fraction), if given, every PROGRESS_EVERY numbers tried.
export function powSearch(salt, target, maxnumber, progress) {
    const want = new Int32Array(8);
    for (let i = 0; i < 8; i++) want[i] = parseInt(target.slice(8 * i, 8 * i + 8), 16) | 0;
    const bytes = new TextEncoder().encode(salt);

    // The chaining value after the salt's whole blocks.
    const mid = H0.slice();
    const W = new Int32Array(64);
    const v = new Int32Array(8);
    const whole = bytes.length - (bytes.length % 64);
    for (let off = 0; off < whole; off += 64) {
        load(W, bytes, off);
        compress(mid, W, v);
    }

    // The rest of the salt starts the next block; its words that hold
    // salt bytes only, and the rounds that read nothing else, are fixed.
    const rest = bytes.length - whole;
    const buf = new Uint8Array(128);
    buf.set(bytes.subarray(whole));
    const fixed = rest >> 2;
    load(W, buf, 0);
    const pre = mid.slice();
    rounds(pre, W, 0, fixed);

    const H = new Int32Array(8);
    const total = maxnumber + 1;
    for (let n = 0; n <= maxnumber; n++) {
        const digits = String(n);
        let at = rest;
        for (let i = 0; i < digits.length; i++) buf[at++] = digits.charCodeAt(i);
        const end = pad(buf, at, bytes.length + digits.length);

        // The first block from its fixed rounds on.
        for (let i = fixed; i < 16; i++) {
            const o = 4 * i;
            W[i] = (buf[o] << 24) | (buf[o + 1] << 16) | (buf[o + 2] << 8) | buf[o + 3];
        }
        extend(W);
        v.set(pre);
        rounds(v, W, fixed, 64);
        for (let i = 0; i < 8; i++) H[i] = (mid[i] + v[i]) | 0;
        if (end > 64) {
            // Digits or padding spill into a second block (a salt that
            // ends late in its block).
            load(W, buf, 64);
            compress(H, W, v);
            // The first block's fixed words were overwritten.
            load(W, buf, 0);
        }

        if (H[0] === want[0]) {
            let same = true;
            for (let i = 1; i < 8; i++) same = same && H[i] === want[i];
            if (same) return n;
        }
        if ((n + 1) % PROGRESS_EVERY === 0 && progress) progress((n + 1) / total);
    }
    return -1;
}

function onChallenge(ev) {
    const c = (ev.data && ev.data.challenge) || {};
    if (
        c.algorithm !== "SHA-256" ||
        typeof c.salt !== "string" ||
        !/^[0-9a-f]{64}$/.test(c.challenge) ||
        !Number.isSafeInteger(c.maxnumber) ||
        c.maxnumber < 0
    ) {
        self.postMessage({ failed: "not a SHA-256 challenge this page can solve" });
        return;
    }
    const n = powSearch(c.salt, c.challenge, c.maxnumber, (f) => self.postMessage({ progress: f }));
    self.postMessage(n >= 0 ? { number: n } : { failed: `no number up to ${c.maxnumber} solves the challenge` });
}

// Only when running as a worker: a page that imports the module keeps its
// own onmessage.
if (typeof WorkerGlobalScope !== "undefined" && self instanceof WorkerGlobalScope)
    self.onmessage = onChallenge;
