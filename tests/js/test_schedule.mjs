// @ts-check
/** @file pipeline/schedule against diffusers' scheduler and pipeline (golden schedule.json). @module tests/js/test_schedule */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { computeEmpiricalMu, retrieveTimesteps, timeShift } from '../../web_src/src/pipeline/schedule.js';
import { InputError } from '../../web_src/src/shared/errors.js';
import { assertSameFloat32, float32s, float64s, loadGolden } from './golden.mjs';

const golden = loadGolden('schedule.json');

test('retrieveTimesteps equals Flux2KleinPipeline + FlowMatchEulerDiscreteScheduler (mu, sigmas, timesteps, t/1000)', () => {
    assert.ok(golden.cases.length >= 20);
    for (const c of golden.cases) {
        const what = `${c.height}x${c.width}, ${c.steps} steps`;
        assert.equal(computeEmpiricalMu(c.image_seq_len, c.steps), c.mu, `${what}: mu`);
        const schedule = retrieveTimesteps(c.steps, c.image_seq_len);
        assert.equal(schedule.mu, c.mu, `${what}: mu`);
        assertSameFloat32(schedule.sigmas, float32s(c.sigmas), `${what}: sigmas`);
        assertSameFloat32(schedule.timesteps, float32s(c.timesteps), `${what}: timesteps`);
        assertSameFloat32(schedule.modelTimesteps, float32s(c.model_timesteps), `${what}: model timesteps`);
        assert.equal(schedule.sigmas[c.steps], 0, `${what}: terminal sigma`);
    }
});

test('timeShift equals the scheduler for every token count up to 2048x2048 px (Math.exp vs libm exp)', () => {
    const { steps, base_sigmas: base, mu, sigmas } = golden.grid;
    const mus = float64s(mu);
    const expected = float32s(sigmas);
    const baseSigmas = float32s(base);
    const got = new Float32Array(expected.length);
    for (let i = 0; i < mus.length; i++) {
        const seqLen = i + 1;
        assert.equal(computeEmpiricalMu(seqLen, steps), mus[i], `mu for ${seqLen} tokens`);
        got.set(timeShift(mus[i], baseSigmas), i * steps);
    }
    assertSameFloat32(got, expected, 'shifted sigmas over the token grid');
});

test('the model timestep t/1000 is not always sigma (why modelTimesteps exists)', () => {
    const differs = golden.cases.some((/** @type {any} */ c) => {
        const s = retrieveTimesteps(c.steps, c.image_seq_len);
        return s.modelTimesteps.some((t, i) => t !== s.sigmas[i]);
    });
    assert.ok(differs);
});

test('schedule functions reject non-integer or non-positive sizes and steps with InputError', () => {
    for (const [steps, seq] of [
        [0, 16],
        [4, 0],
        [2.5, 16],
        [4, Number.NaN],
        [-1, 16],
        ['4', 16],
    ]) {
        assert.throws(
            () => retrieveTimesteps(/** @type {any} */ (steps), /** @type {any} */ (seq)),
            (err) => {
                assert.ok(err instanceof InputError);
                assert.match(err.message, /`(numSteps|imageSeqLen)` must be an integer >= 1, got/);
                return true;
            },
        );
    }
});
