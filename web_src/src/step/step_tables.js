// @ts-check
/**
 * @file The two small inputs of a step that the graph computes from its inputs with a chain of tiny ops, computed
 * here on the CPU instead (each is a handful of values per token, and a kernel per op would cost more to launch
 * than to run): the timestep's sinusoidal embedding and the RoPE angles' cos and sin per token.
 *
 * Both follow the graph's float32 arithmetic: the product that forms each angle is rounded to float32 as the
 * graph's Mul rounds it, and only cos and sin are evaluated in double precision (then rounded), where the GPU
 * evaluates them in float32: the tables agree to about one float32 rounding.
 * @module step/step_tables
 */

/** Position ids per token: the graph's img_ids and txt_ids are [tokens, 4] (time, y, x, sequence). */
export const ID_AXES = 4;

/**
 * The timestep embedding the time MLP reads: [cos(t·f_0..), sin(t·f_0..)] (diffusers' get_timestep_embedding with
 * flip_sin_to_cos) for t = f32(timestep · timeScale).
 * @param {number} timestep  The graph's `timestep` input (the scheduler's timestep / 1000).
 * @param {{timeScale: number, timeFreqs: Float32Array}} config
 * @returns {Float32Array}  2 · timeFreqs.length values.
 */
export function timestepEmbedding(timestep, { timeScale, timeFreqs }) {
    const half = timeFreqs.length;
    const out = new Float32Array(2 * half);
    const t = Math.fround(Math.fround(timestep) * timeScale);
    for (let i = 0; i < half; i++) {
        const angle = Math.fround(t * timeFreqs[i]);
        out[i] = Math.cos(angle);
        out[half + i] = Math.sin(angle);
    }
    return out;
}

/**
 * The RoPE table of the joint sequence, text tokens first: per token and rotated pair, (cos, sin) of
 * f32(position on the pair's axis · the pair's frequency).
 * @param {BigInt64Array} txtIds  [textTokens, axes]
 * @param {BigInt64Array} imgIds  [imageTokens, axes]
 * @param {{ropeAxes: Int32Array, ropeFreqs: Float32Array}} config  Per pair: its axis and frequency.
 * @returns {Float32Array}  [textTokens + imageTokens, pairs, 2]
 */
export function ropeTable(txtIds, imgIds, { ropeAxes, ropeFreqs }) {
    const pairs = ropeFreqs.length;
    const axes = ID_AXES;
    const textTokens = txtIds.length / axes;
    const tokens = textTokens + imgIds.length / axes;
    const out = new Float32Array(tokens * pairs * 2);
    for (let token = 0; token < tokens; token++) {
        const ids = token < textTokens ? txtIds : imgIds;
        const row = token < textTokens ? token : token - textTokens;
        for (let p = 0; p < pairs; p++) {
            const angle = Math.fround(Number(ids[row * axes + ropeAxes[p]]) * ropeFreqs[p]);
            out[(token * pairs + p) * 2] = Math.cos(angle);
            out[(token * pairs + p) * 2 + 1] = Math.sin(angle);
        }
    }
    return out;
}
