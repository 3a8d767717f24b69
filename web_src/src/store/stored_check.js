// @ts-check
/**
 * @file Checking that a stored model file is still the file that was downloaded, each time a load reads it.
 *
 * A stored file is verified once, as it downloads (store/block_check.js). Its bytes can change later: the disk, the
 * browser, an extension or the user's own tools can write into the site's storage, and a changed weight file makes
 * every image NaN or a session that cannot be created, with nothing downloaded again. So every stored file a load
 * reads is checked against the manifest's size and block hashes (the SHA-256 of each 16 MiB block, which the
 * manifest lists beside each file's sha256):
 * - a file read whole (a graph, the VAE's weights, the tokenizer) is checked in the helper worker that reads it,
 *   before its bytes are handed over (checkStoredBytes);
 * - a file whose weights stream to the GPU in parts (models/graph_upload.js) is checked block by block by a helper
 *   worker that reads it beside the upload, from the moment it is opened (checkStoredFile); the upload waits for
 *   that check before it hands its buffers to a session. Its size is checked at once, when it is opened.
 * A file that fails is reported with a StoredFileError naming it; the worker deletes it and downloads it again
 * (worker/recovery.js). A manifest without block hashes leaves only the size to check (hashing a whole file
 * sequentially would cost more than the load itself); one without sizes (a Hub folder without manifest) nothing.
 * @module store/stored_check
 */

import { StoredFileError } from '../shared/errors.js';
import { DIGESTS_IN_FLIGHT, sha256Hex } from './block_check.js';

/** @typedef {import('../shared/model_repo.js').Blocks} Blocks */
/** @typedef {import('./stored_file.js').StoredFile} StoredFile */

/**
 * @typedef {Object} Expected  What the manifest says a stored file is.
 * @property {number | null} size
 * @property {Blocks | null} blocks
 */

/**
 * The StoredFileError for a stored file of `actual` bytes, or null when that is the manifest's size.
 * @param {string} path
 * @param {number} actual
 * @param {Expected} expected
 * @returns {StoredFileError | null}
 */
export function sizeProblem(path, actual, expected) {
    if (expected.size === null || actual === expected.size) return null;
    return new StoredFileError(
        `${path} changed in this browser's storage since it was downloaded: it has ${actual} bytes, the model's ` +
            `manifest ${expected.size}`,
        { path },
    );
}

/**
 * The block `index` of a stored file does not hash to the manifest's.
 * @param {string} path
 * @param {Blocks} blocks
 * @param {number} index
 * @param {number} length  The block's bytes.
 * @returns {StoredFileError}
 */
function blockProblem(path, blocks, index, length) {
    const start = index * blocks.size;
    return new StoredFileError(
        `${path} changed in this browser's storage since it was downloaded: bytes ${start}-${start + length - 1} ` +
            `(block ${index + 1} of ${blocks.sha256.length}) no longer match the model's manifest`,
        { path, block: index },
    );
}

/**
 * Digest the blocks of a stored file as `blockAt(index, bytes)` fills each, a few digests under way at once
 * (WebCrypto copies a block at the call, so `bytes` may be refilled for the next block at once).
 * @param {string} path
 * @param {number} size
 * @param {Blocks} blocks
 * @param {(index: number, length: number) => Promise<Uint8Array>} blockAt  The bytes of block `index`.
 */
async function checkBlocks(path, size, blocks, blockAt) {
    /** @type {Promise<void>[]} */
    const digests = [];
    /** @type {StoredFileError | null} */
    let problem = null;
    for (let index = 0; index * blocks.size < size && problem === null; index++) {
        const length = Math.min(blocks.size, size - index * blocks.size);
        const bytes = await blockAt(index, length);
        digests.push(
            sha256Hex(bytes).then((hex) => {
                if (hex !== blocks.sha256[index]) problem ??= blockProblem(path, blocks, index, length);
            }),
        );
        while (digests.length > DIGESTS_IN_FLIGHT) await digests.shift();
    }
    await Promise.all(digests);
    if (problem) throw problem;
}

/**
 * Check a stored file's bytes, read whole, against the manifest (throws a StoredFileError).
 * @param {Uint8Array} bytes
 * @param {string} path
 * @param {Expected} expected
 */
export async function checkStoredBytes(bytes, path, expected) {
    const wrongSize = sizeProblem(path, bytes.byteLength, expected);
    if (wrongSize) throw wrongSize;
    const { blocks } = expected;
    if (blocks === null) return;
    await checkBlocks(path, bytes.byteLength, blocks, async (index, length) =>
        bytes.subarray(index * blocks.size, index * blocks.size + length),
    );
}

/**
 * Check a stored file, read block by block into one reused buffer, against the manifest (throws a StoredFileError).
 * @param {StoredFile} file
 * @param {string} path
 * @param {Expected} expected
 */
export async function checkStoredFile(file, path, expected) {
    const wrongSize = sizeProblem(path, file.size, expected);
    if (wrongSize) throw wrongSize;
    const { blocks } = expected;
    if (blocks === null || file.size === 0) return;
    const buffer = new Uint8Array(Math.min(blocks.size, file.size));
    await checkBlocks(path, file.size, blocks, async (index, length) => {
        const bytes = buffer.subarray(0, length);
        const read = await file.readInto(bytes, index * blocks.size);
        if (read !== length)
            throw new StoredFileError(
                `${path} changed in this browser's storage while it was read: it ends at byte ` +
                    `${index * blocks.size + read} of ${file.size}`,
                { path },
            );
        return bytes;
    });
}
