// What every ONNX Runtime anchor shares: one session setting (CPU EP, 2
// intra-op threads, all graph optimisations) and one timing rule (WARMUP runs,
// then REPS timed runs into preallocated outputs; times in ms, sorted).
const ort = require('onnxruntime-node');

function createSession(modelPath) {
  return ort.InferenceSession.create(modelPath, {
    executionProviders: ['cpu'], intraOpNumThreads: 2, interOpNumThreads: 1, graphOptimizationLevel: 'all',
  });
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

const median = (sorted) => sorted[Math.floor(sorted.length / 2)];

module.exports = {ort, createSession, timeRuns, median};
