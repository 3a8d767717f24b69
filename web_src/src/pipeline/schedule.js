// @ts-check
/**
 * @file The FLUX.2 [klein] sampling schedule: `mu` from the image size and step count, the exponentially
 * time-shifted sigmas, the scheduler timesteps and the `t / 1000` the transformer receives. Every value is
 * bit-exact with diffusers' `Flux2KleinPipeline` + `FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True,
 * time_shift_type="exponential")`: doubles where Python/numpy use doubles, `Math.fround` after every float32 op.
 * @module pipeline/schedule
 */

import { InputError } from '../shared/errors.js';

const f32 = Math.fround;

/** `FlowMatchEulerDiscreteScheduler.config.num_train_timesteps` of FLUX.2. */
export const NUM_TRAIN_TIMESTEPS = 1000;
/** The scheduler_config.json settings this schedule is the math of (the CPU reference refuses a repo with others). */
export const SCHEDULER_CONFIG = Object.freeze({
    num_train_timesteps: NUM_TRAIN_TIMESTEPS,
    use_dynamic_shifting: true,
    time_shift_type: 'exponential',
});
/**
 * compute_empirical_mu's fits of mu against the image tokens ([slope, intercept]), at 10 and at 200 steps; above
 * MU_FIT_TOKENS_MAX tokens the 200-step fit alone gives mu.
 */
export const MU_FIT_10_STEPS = Object.freeze([8.73809524e-5, 1.89833333]);
export const MU_FIT_200_STEPS = Object.freeze([0.00016927, 0.45666666]);
export const MU_FIT_TOKENS_MAX = 4300;

/**
 * @param {string} name
 * @param {unknown} value
 * @param {number} min
 */
function checkPositiveInteger(name, value, min = 1) {
    if (!Number.isInteger(value) || /** @type {number} */ (value) < min) {
        throw new InputError(`\`${name}\` must be an integer >= ${min}, got ${String(value)}.`, { [name]: value });
    }
}

// Port of diffusers.pipelines.flux2.pipeline_flux2_klein.compute_empirical_mu @ 0.42.1
/**
 * The time-shift parameter fitted by BFL: linear in the token count, interpolated between the fits for
 * 10 and 200 steps (plain double arithmetic, like Python).
 * @param {number} imageSeqLen Packed image tokens, (H/16)*(W/16).
 * @param {number} numSteps Denoising steps.
 * @returns {number} mu (double)
 */
export function computeEmpiricalMu(imageSeqLen, numSteps) {
    checkPositiveInteger('imageSeqLen', imageSeqLen);
    checkPositiveInteger('numSteps', numSteps);
    const [a1, b1] = MU_FIT_10_STEPS;
    const [a2, b2] = MU_FIT_200_STEPS;

    if (imageSeqLen > MU_FIT_TOKENS_MAX) return a2 * imageSeqLen + b2;

    const m200 = a2 * imageSeqLen + b2;
    const m10 = a1 * imageSeqLen + b1;
    const a = (m200 - m10) / 190.0;
    const b = m200 - 200.0 * a;
    return a * numSteps + b;
}

/**
 * `numpy.linspace(1.0, 1/n, n)` in doubles: `i * step + start` with `step = (stop - start) / (n - 1)`,
 * and the last element set to `stop` exactly (numpy `endpoint=True`).
 * @param {number} n
 * @returns {Float64Array}
 */
function linspaceOneToInverse(n) {
    const start = 1.0;
    const stop = 1 / n;
    const out = new Float64Array(n);
    if (n === 1) {
        out[0] = start; // numpy: div == 0 -> y = [0] * delta + start
        return out;
    }
    const step = (stop - start) / (n - 1);
    for (let i = 0; i < n; i++) out[i] = i * step + start;
    out[n - 1] = stop;
    return out;
}

// Port of diffusers.schedulers.scheduling_flow_match_euler_discrete.FlowMatchEulerDiscreteScheduler._time_shift_exponential @ 0.42.1
/**
 * The exponential time shift `math.exp(mu) / (math.exp(mu) + (1 / t - 1) ** 1.0)` with numpy's float32
 * semantics: `t` is a float32 array and the Python floats are "weak" scalars, so `exp(mu)` is rounded to
 * float32 once, every operation rounds to float32, and `** 1.0` is the identity.
 * `Math.exp` (fdlibm in V8) and glibc's `exp` may differ in the last bit of the double; that never changes
 * float32(exp(mu)) for any image up to 2560x2560 px and up to 60 steps (checked against CPython's math.exp),
 * and tests/golden/make_golden.py re-checks every token count up to 16384.
 * @param {number} mu
 * @param {Float32Array} sigmas float32 sigmas in (0, 1]
 * @returns {Float32Array} shifted sigmas
 */
export function timeShift(mu, sigmas) {
    const expMu = f32(Math.exp(mu));
    return sigmas.map((t) => f32(expMu / f32(expMu + f32(f32(1 / t) - 1))));
}

/**
 * @typedef {Object} Schedule
 * @property {number} mu                    compute_empirical_mu(imageSeqLen, numSteps) (double).
 * @property {Float32Array} sigmas          N+1 shifted sigmas, the last one 0 (scheduler.sigmas).
 * @property {Float32Array} timesteps       N scheduler timesteps, float32(sigma * 1000).
 * @property {Float32Array} modelTimesteps  N values fed to the transformer: float32(timestep / 1000).
 */

// Port of diffusers.pipelines.flux2.pipeline_flux2_klein.retrieve_timesteps @ 0.42.1
/**
 * The schedule `Flux2KleinPipeline.__call__` builds in stage "6. Prepare timesteps":
 * `sigmas = linspace(1, 1/N, N)`, `mu = compute_empirical_mu(image_seq_len, N)`, then
 * `scheduler.set_timesteps(sigmas=sigmas, mu=mu)`.
 * @param {number} numSteps Denoising steps N (klein is distilled for 4).
 * @param {number} imageSeqLen Packed image tokens, (H/16)*(W/16).
 * @returns {Schedule}
 */
export function retrieveTimesteps(numSteps, imageSeqLen) {
    const mu = computeEmpiricalMu(imageSeqLen, numSteps);
    // set_timesteps: np.array(sigmas).astype(np.float32), then the dynamic (exponential) time shift.
    const shifted = timeShift(mu, Float32Array.from(linspaceOneToInverse(numSteps)));
    const sigmas = new Float32Array(numSteps + 1); // the trailing 0 is the terminal sigma
    sigmas.set(shifted);
    const timesteps = new Float32Array(numSteps);
    const modelTimesteps = new Float32Array(numSteps);
    for (let i = 0; i < numSteps; i++) {
        // scheduler.timesteps = sigmas * num_train_timesteps (float32 tensor op)
        timesteps[i] = f32(sigmas[i] * NUM_TRAIN_TIMESTEPS);
        // The pipeline passes `timestep / 1000` (a float32 tensor op), which is not always sigma itself.
        modelTimesteps[i] = f32(timesteps[i] / NUM_TRAIN_TIMESTEPS);
    }
    return { mu, sigmas, timesteps, modelTimesteps };
}
