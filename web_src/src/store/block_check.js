// @ts-check
/**
 * @file Checking a download against the manifest's block hashes (manifest.json `blocks`: the SHA-256 of each
 * fixed-size block of the file). Each block is digested with the browser's native SHA-256 (WebCrypto, which takes
 * whole buffers only) as soon as its last byte has arrived, while the next ones stream in: native SHA-256 runs
 * several times faster than a sequential one in WebAssembly (store/hashing.js), so the check keeps up with a fast
 * download, and a corrupt block is refused once it is complete instead of at the end of the file.
 *
 * It stands in for the running SHA-256 of a download (store/hashing.js Sha256): update() takes the bytes in order,
 * hex() answers with the file's sha256 from the manifest once every block has matched, and a block that does not
 * match throws an IntegrityError from update() or hex(). A file whose every block is the manifest's, at the
 * manifest's size, is the manifest's file: the manifest is what vouches for both hashes.
 * @module store/block_check
 */

import { hex as toHex } from '../shared/bytes.js'; // this file's Sha256 has a method hex() of its own
import { IntegrityError } from '../shared/errors.js';

/** @typedef {import('../shared/model_repo.js').Blocks} Blocks */
/** @typedef {import('./hashing.js').Sha256} Sha256 */

/** Block digests under way at once (each holds a copy of its block until it is done). */
export const DIGESTS_IN_FLIGHT = 4;

/**
 * The SHA-256 of `bytes` (lowercase hex), by WebCrypto, which copies them at the call: the caller may reuse their
 * buffer as soon as this returns its promise.
 * @param {Uint8Array} bytes
 * @returns {Promise<string>}
 */
export function sha256Hex(bytes) {
    return crypto.subtle.digest('SHA-256', /** @type {Uint8Array<ArrayBuffer>} */ (bytes)).then(toHex);
}

/** @implements {Sha256} */
export class BlockCheck {
    /**
     * @param {{blocks: Blocks, sha256: string, url: string}} wanted  The manifest's blocks and whole-file sha256 of the
     *   file downloaded from `url` (named in errors).
     */
    constructor({ blocks, sha256, url }) {
        this.blocks = blocks;
        this.sha256 = sha256;
        this.url = url;
        /** Bytes fed so far. */
        this.bytes = 0;
        /** @type {Uint8Array<ArrayBuffer> | null} The block being filled (allocated with its first byte). */
        this.block = null;
        this.filled = 0;
        /** Blocks handed to WebCrypto so far. */
        this.started = 0;
        /** @type {Promise<void>[]} Their digests under way, oldest first. */
        this.digests = [];
        /** @type {IntegrityError | null} The first block found not to match. */
        this.error = null;
    }

    /** @param {Uint8Array} chunk */
    async update(chunk) {
        if (this.error) throw this.error;
        const size = this.blocks.size;
        for (let at = 0; at < chunk.byteLength;) {
            this.block ??= new Uint8Array(size);
            const n = Math.min(chunk.byteLength - at, size - this.filled);
            this.block.set(chunk.subarray(at, at + n), this.filled);
            this.filled += n;
            at += n;
            if (this.filled === size) this.digestBlock();
        }
        this.bytes += chunk.byteLength;
        // A bounded number of digests (and their copies of the blocks) at a time.
        while (this.digests.length > DIGESTS_IN_FLIGHT) await this.digests.shift();
        if (this.error) throw this.error;
    }

    /** Hand the filled part of the block to WebCrypto, which copies it at once, so the buffer is free again. */
    digestBlock() {
        const index = this.started++;
        const start = index * this.blocks.size;
        const bytes = /** @type {Uint8Array<ArrayBuffer>} */ (this.block).subarray(0, this.filled);
        this.filled = 0;
        const expected = this.blocks.sha256[index];
        const digest = sha256Hex(bytes).then((got) => {
            if (got === expected || this.error) return;
            this.error = new IntegrityError(
                `${this.url} does not match the model's manifest: bytes ${start}-${start + bytes.byteLength - 1} (block ` +
                    `${index + 1} of ${this.blocks.sha256.length}) have the SHA-256 ${got}, the manifest says ` +
                    `${expected ?? 'the file ends before them'}. The downloaded copy was deleted.`,
                { url: this.url, block: index, sha256: got, expected: expected ?? null },
            );
        });
        this.digests.push(digest);
    }

    /** @returns {Promise<string>} The manifest's sha256: every block matched. */
    async hex() {
        if (this.filled > 0) this.digestBlock();
        await Promise.all(this.digests);
        this.digests = [];
        this.block = null;
        if (this.error) throw this.error;
        const count = this.blocks.sha256.length;
        if (this.started !== count) {
            throw new IntegrityError(
                `${this.url} does not match the model's manifest: it has ${this.started} blocks of ` +
                    `${this.blocks.size} bytes, the manifest lists ${count}. The downloaded copy was deleted.`,
                { url: this.url, blocks: this.started, expected: count },
            );
        }
        return this.sha256;
    }

    drop() {
        this.block = null;
        this.digests = [];
    }
}
