// Runs the Vanilla UNet ONNX file with ONNX Runtime (onnxruntime-node, CPU EP,
// 2 intra-op threads, all graph optimisations) on DIR/input.bin: writes
// DIR/ort_output.bin (float32 logits) and DIR/ort.txt ("median min max" ms
// over REPS runs after 2 warm-up runs, output preallocated).
//
//   node run_unet.js DIR [REPS]
const fs = require('fs');
const path = require('path');
const {ort, createSession, timeRuns, median} = require('./session');

async function main() {
  const [dir, repsArg] = process.argv.slice(2);
  const reps = Number(repsArg || 10);
  const session = await createSession(path.join(dir, 'unet.onnx'));
  const buf = fs.readFileSync(path.join(dir, 'input.bin'));
  const x = new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4);
  const feeds = {input: new ort.Tensor('float32', x, [1, 3, 480, 640])};
  const out = new ort.Tensor('float32', new Float32Array(480 * 640), [1, 1, 480, 640]);
  const fetches = {output: out};
  const times = await timeRuns(session, feeds, fetches, reps, 2);
  fs.writeFileSync(path.join(dir, 'ort_output.bin'), Buffer.from(out.data.buffer, out.data.byteOffset, out.data.byteLength));
  fs.writeFileSync(path.join(dir, 'ort.txt'),
                   `${median(times).toFixed(3)} ${times[0].toFixed(3)} ${times[times.length - 1].toFixed(3)}\n`);
}
main().catch((e) => { console.error(e); process.exit(1); });
