// @ts-check
/**
 * @file Tabs of one origin share one model store (OPFS), each with its own worker. Every job that reads or writes
 * the store (generate, load) holds the store's lock shared; "clear cached model" takes it exclusively, and only if
 * no job anywhere holds it: clearing under another tab's download or generation would leave that tab with files
 * that vanished mid-use. After a clear every other tab's worker hears of it (a BroadcastChannel) and forgets its
 * store, sessions and derived objects, so its next Generate downloads the model again instead of failing on
 * missing files. Where the browser has no Web Locks or BroadcastChannel, jobs run unguarded, as one tab would.
 * @module store/store_lock
 */

import { ErrorCode, KleinError } from '../shared/errors.js';

/** The Web Locks name of the model store, and the BroadcastChannel its changes go out on. */
export const STORE_LOCK = 'klein-web-store';

/** @returns {LockManager | null} */
function locks() {
    return typeof navigator !== 'undefined' && navigator.locks ? navigator.locks : null;
}

/**
 * Run `task` while holding the store shared (other tabs' jobs too; a clear waits for none and is refused).
 * @template T
 * @param {() => Promise<T>} task
 * @returns {Promise<T>}
 */
export async function whileUsingStore(task) {
    const manager = locks();
    if (!manager) return task();
    return /** @type {Promise<T>} */ (manager.request(STORE_LOCK, { mode: 'shared' }, task));
}

/**
 * Run `task` (the clear) holding the store exclusively, or refuse at once when a job of any tab holds it; then tell
 * the other tabs.
 * @template T
 * @param {() => Promise<T>} task
 * @returns {Promise<T>}
 */
export async function clearingStore(task) {
    const manager = locks();
    const result = manager
        ? await manager.request(STORE_LOCK, { mode: 'exclusive', ifAvailable: true }, async (lock) => {
              if (!lock) {
                  throw new KleinError(
                      'The cached model is in use in another tab of this app (a download or a generation). Wait ' +
                          'for it to finish, or cancel it there, then clear the cache.',
                      { code: ErrorCode.BUSY },
                  );
              }
              return { value: await task() };
          })
        : { value: await task() };
    announce('cleared');
    return result.value;
}

/**
 * @param {string} change
 */
function announce(change) {
    if (typeof BroadcastChannel === 'undefined') return;
    const channel = new BroadcastChannel(STORE_LOCK);
    channel.postMessage({ change });
    channel.close();
}

/**
 * Call `onCleared` whenever another tab clears the store (never for this worker's own clear).
 * @param {() => void} onCleared
 */
export function onStoreCleared(onCleared) {
    if (typeof BroadcastChannel === 'undefined') return;
    const channel = new BroadcastChannel(STORE_LOCK);
    channel.onmessage = (event) => {
        if (event.data?.change === 'cleared') onCleared();
    };
}
