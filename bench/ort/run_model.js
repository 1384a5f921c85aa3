// Runs an ONNX model with ONNX Runtime (session.js: CPU EP, 2 intra-op
// threads, all graph optimisations) on a float32 .npy input and writes the
// first output as OUTPUT.npy, or, when OUTPUT does not end in .npy, every
// output as OUTPUT/NAME.npy (the names as `tessera run --output-dir` writes
// them). With REPS > 0 it also times REPS runs after 3 warm-up runs and
// prints "ort MODEL median min max" in ms.
//
//   node run_model.js MODEL.onnx INPUT.npy OUTPUT.npy|OUTPUT_DIR [REPS]
const fs = require('fs');
const path = require('path');
const {ort, createSession, timeRuns, median} = require('./session');

// A little-endian float32 C-order .npy (format 1.0 / 2.0).
function readNpy(path) {
  const b = fs.readFileSync(path);
  if (b.toString('latin1', 1, 6) !== 'NUMPY') throw new Error(`${path}: not a .npy file`);
  const major = b[6];
  const hlen = major === 1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
  const start = (major === 1 ? 10 : 12);
  const header = b.toString('latin1', start, start + hlen);
  if (!header.includes("'<f4'") || header.includes("'fortran_order': True"))
    throw new Error(`${path}: expected a C-order float32 array, header ${header}`);
  const dims = header.match(/'shape': \(([^)]*)\)/)[1].split(',').filter((s) => s.trim()).map(Number);
  const data = b.subarray(start + hlen);
  const f = new Float32Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength));
  return {dims, data: f};
}

// The .npy descr of each ONNX Runtime tensor type an output may have.
const kDescr = {float32: '<f4', float64: '<f8', float16: '<f2', int64: '<i8', int32: '<i4', int16: '<i2',
                int8: '|i1', uint8: '|u1', uint16: '<u2', uint32: '<u4', uint64: '<u8', bool: '|b1'};

function writeNpy(path, dims, data, type = 'float32') {
  if (!(type in kDescr)) throw new Error(`${path}: no .npy type for an ONNX Runtime ${type} tensor`);
  const shape = dims.length === 0 ? '()' : dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`;
  let header = `{'descr': '${kDescr[type]}', 'fortran_order': False, 'shape': ${shape}, }`;
  header += ' '.repeat(64 - ((10 + header.length + 1) % 64)) + '\n';
  const head = Buffer.alloc(10);
  head.write('\x93NUMPY', 0, 'latin1');
  head[6] = 1;
  head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  fs.writeFileSync(path, Buffer.concat([head, Buffer.from(header, 'latin1'),
                                        Buffer.from(data.buffer, data.byteOffset, data.byteLength)]));
}

async function main() {
  const [model, input, output, repsArg] = process.argv.slice(2);
  if (!output) throw new Error('usage: node run_model.js MODEL.onnx INPUT.npy OUTPUT.npy|OUTPUT_DIR [REPS]');
  const reps = Number(repsArg || 0);
  const session = await createSession(model);
  const x = readNpy(input);
  const feeds = {[session.inputNames[0]]: new ort.Tensor('float32', x.data, x.dims)};
  const result = await session.run(feeds);
  if (output.endsWith('.npy')) {
    const y = result[session.outputNames[0]];
    writeNpy(output, y.dims, y.data, y.type);
  } else {
    fs.mkdirSync(output, {recursive: true});
    for (const name of session.outputNames) {
      const y = result[name];
      writeNpy(path.join(output, name.replace(/[^A-Za-z0-9._-]/g, '_') + '.npy'), y.dims, y.data, y.type);
    }
  }
  if (reps > 0) {
    const times = await timeRuns(session, feeds, undefined, reps, 3);
    console.log(`ort ${model} ${median(times).toFixed(3)} ${times[0].toFixed(3)} ${times[times.length - 1].toFixed(3)}`);
  }
}
main().catch((e) => { console.error(e.message || e); process.exit(1); });
