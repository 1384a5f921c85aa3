// What every ONNX Runtime anchor shares: one session setting (CPU EP, 2
// intra-op threads, all graph optimisations) and two timing rules: whole
// models end to end (timeRuns: WARMUP runs, then REPS timed runs; times in
// ms, sorted), one-layer models by ONNX Runtime's own kernel times
// (kernelTimes).
const fs = require('fs');
const os = require('os');
const path = require('path');
const ort = require('onnxruntime-node');

const profilePrefixes = new Map();  // profiled session -> its profile file's path prefix
let profiled = 0;
async function createSession(modelPath, profile = false) {
  const options = {executionProviders: ['cpu'], intraOpNumThreads: 2, interOpNumThreads: 1, graphOptimizationLevel: 'all'};
  const prefix = path.join(os.tmpdir(), `ort_profile_${process.pid}_${profiled++}_`);
  if (profile) Object.assign(options, {enableProfiling: true, profileFilePrefix: prefix});
  const session = await ort.InferenceSession.create(modelPath, options);
  if (profile) profilePrefixes.set(session, prefix);
  return session;
}

async function timeRuns(session, feeds, fetches, reps, warmup = 3) {
  for (let i = 0; i < warmup; ++i) await session.run(feeds, fetches);
  const times = [];
  for (let i = 0; i < reps; ++i) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds, fetches);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  return times.sort((a, b) => a - b);
}

// For one-layer models: ONNX Runtime's own kernel time per run (its
// profiler), summed over the model's nodes but the layout reorders its NCHWc
// transformer adds around them (Tessera's rows need none), in ms, sorted.
// End-to-end runs of such a model time the binding, not the layer:
// onnxruntime-node hands every output back in a fresh buffer, even with a
// preallocated fetch, and on this VM the first touch of those pages took
// 10-40x the layer's time (26,000 minor faults over 18 runs of a 3.2 MB
// output; bench/RESULTS.md, sixteenth run). The session must come from
// createSession(path, true); this ends its profiling.
async function kernelTimes(session, feeds, reps, warmup = 3) {
  for (let i = 0; i < warmup + reps; ++i) await session.run(feeds);
  // endProfiling names the file in some versions of the binding; else find it by its prefix.
  const prefix = profilePrefixes.get(session);
  if (!prefix) throw new Error('kernelTimes needs a session from createSession(path, true)');
  const file = (await session.endProfiling()) ||
      fs.readdirSync(os.tmpdir()).map((f) => path.join(os.tmpdir(), f)).find((f) => f.startsWith(prefix));
  profilePrefixes.delete(session);
  if (!file) throw new Error(`no ONNX Runtime profile at ${prefix}*`);
  const trace = JSON.parse(fs.readFileSync(file, 'utf8'));
  fs.unlinkSync(file);
  const perNode = new Map();  // node name -> its kernel time in each run, in order
  for (const e of trace) {
    if (e.cat !== 'Node' || !e.name.endsWith('_kernel_time') || e.args.op_name.startsWith('Reorder')) continue;
    if (!perNode.has(e.name)) perNode.set(e.name, []);
    perNode.get(e.name).push(e.dur / 1000);
  }
  if (perNode.size === 0) throw new Error(`no node kernel times in ${file}`);
  const times = [];
  for (let r = warmup; r < warmup + reps; ++r) {
    let t = 0;
    for (const [name, v] of perNode) {
      if (v.length !== warmup + reps) throw new Error(`${name}: ${v.length} profiled runs, expected ${warmup + reps}`);
      t += v[r];
    }
    times.push(t);
  }
  return times.sort((a, b) => a - b);
}

const median = (sorted) => sorted[Math.floor(sorted.length / 2)];

module.exports = {ort, createSession, timeRuns, kernelTimes, median};
