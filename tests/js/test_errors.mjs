// @ts-check
/** @file shared/errors: its codes, and errors crossing the worker boundary as objects. @module tests/js/test_errors */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import * as errors from '../../web_src/src/shared/errors.js';

const { CancelledError, ErrorCode, KleinError, deserializeError, serializeError } = errors;

test('every code is distinct and every error class carries one of them', () => {
    const codes = Object.values(ErrorCode);
    assert.equal(new Set(codes).size, codes.length);
    const classes = Object.values(errors).filter(
        (value) => typeof value === 'function' && value.prototype instanceof Error,
    );
    assert.ok(classes.length >= 10, classes.map((c) => c.name).join(', '));
    for (const Cls of classes) {
        const err = Cls === KleinError ? new KleinError('x') : new /** @type {any} */ (Cls)('x', { a: 1 });
        assert.ok(codes.includes(err.code), `${Cls.name}: ${err.code}`);
        assert.equal(err.name, Cls.name);
    }
});

test('errors survive serializeError -> structuredClone -> deserializeError with class, code and detail', () => {
    const originals = [
        new errors.InputError('bad size', { width: 100 }),
        new errors.OutOfMemoryError('too big', { needed: 5, limit: 4 }),
        new errors.QuotaError('full', { needed: 1, usage: 2, quota: 3 }),
        new KleinError('busy elsewhere', { code: ErrorCode.BUSY }),
        new CancelledError(),
    ];
    for (const original of originals) {
        const copy = deserializeError(structuredClone(serializeError(original)));
        assert.equal(copy.constructor, original.constructor);
        assert.equal(copy.code, original.code);
        assert.equal(copy.message, original.message);
        assert.deepEqual(copy.detail, original.detail);
    }
});

test('foreign throws become internal errors, an abort becomes cancelled', () => {
    const plain = serializeError(new TypeError('boom'));
    assert.equal(plain.code, ErrorCode.INTERNAL);
    assert.equal(plain.message, 'boom');
    assert.match(String(plain.detail), /TypeError: boom/);
    assert.equal(serializeError('text').message, 'text');
    const abort = serializeError(new DOMException('stop', 'AbortError'));
    assert.equal(deserializeError(abort).constructor, CancelledError);
    // A name that only an Object.prototype lookup would find is not a class.
    const odd = deserializeError({ name: 'constructor', code: ErrorCode.RUNTIME, message: 'm' });
    assert.equal(odd.constructor, KleinError);
    assert.equal(odd.code, ErrorCode.RUNTIME);
});

test('a checksum failure crosses the worker boundary and the page says what to do about it', async () => {
    const { adviseError } = await import('../../web_src/src/page/ui/error_view.js');
    const original = new errors.IntegrityError("https://x/a.onnx_data does not match the model's manifest.", {
        path: 'a.onnx_data',
    });
    const copy = deserializeError(structuredClone(serializeError(original)));
    assert.ok(copy instanceof errors.IntegrityError);
    assert.equal(copy.code, ErrorCode.INTEGRITY);
    const advice = adviseError(copy, {});
    assert.match(advice.title, /checksum/);
    assert.equal(advice.message, original.message);
    assert.match(advice.action, /deleted.*Generate to download it again/s);
});
