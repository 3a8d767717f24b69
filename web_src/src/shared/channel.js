// @ts-check
/**
 * @file Requests and their results across a worker boundary, typed: an `Api` pairs each request type with the body
 * it sends, the result it is answered with and the events it may report before that (as onnxruntime-web's
 * proxy-messages pairs each message's `in` with its `out`). `Channel` is the asking side: it numbers the requests,
 * keeps those waiting, and settles each with its answer; `serve` is the answering side: it runs the handler of each
 * request and answers it exactly once. The page <-> inference worker protocol (protocol.js), the inference worker <->
 * store helpers (store/store_workers.js) and the inference worker <-> tokenizer helper (pipeline/tokenizer_helper.js)
 * all speak it.
 *
 * On the wire (protocol.js documents the page's):
 *   asking   {type, id, ...body}
 *   answer   {type: 'result', id, result} | {type: 'error', id, error: SerializedError (shared/errors.js)}
 *   event    {type: <the event's own type>, id, ...fields}, any number before the answer
 * An answer or event whose id no request waits for (a request failed meanwhile) is dropped.
 * @module shared/channel
 */

import { InputError, deserializeError, serializeError } from './errors.js';

/**
 * @typedef {Record<string, {request: object, result: unknown, event?: {type: string}}>} Api  Per request type, the
 *   body it sends (without `type` and `id`), its result, and the events it reports.
 */

/**
 * @typedef {Object} Port  Where the messages go: a Worker, a worker's global scope.
 * @property {(message: any, transfer: Transferable[]) => void} postMessage
 */

/**
 * @typedef {Object} Waiting
 * @property {(result: any) => void} resolve
 * @property {(error: Error) => void} reject
 * @property {((event: any) => void) | undefined} onEvent
 */

/**
 * The asking side. Its owner hands it every message the other side sends (receive) and fails what waits when the
 * other side dies (failAll).
 * @template {Api} A
 */
export class Channel {
    /** @param {Port} port */
    constructor(port) {
        this.port = port;
        this.nextId = 1;
        /** @type {Map<string, Waiting>} */
        this.waiting = new Map();
    }

    /**
     * Send a request: its id (to name it in a later request, e.g. a cancel) and its result.
     * @template {keyof A & string} T
     * @param {T} type
     * @param {A[T]['request']} body
     * @param {{transfer?: Transferable[], onEvent?: (event: NonNullable<A[T]['event']>) => void}} [options]
     *   `transfer`: buffers that move with the body; `onEvent`: the request's events before its result.
     * @returns {{id: string, result: Promise<A[T]['result']>}}
     */
    send(type, body, { transfer = [], onEvent } = {}) {
        const id = String(this.nextId++);
        const result = new Promise((resolve, reject) => this.waiting.set(id, { resolve, reject, onEvent }));
        this.port.postMessage({ ...body, type, id }, transfer);
        return { id, result };
    }

    /**
     * Send a request and wait for its result (send().result).
     * @template {keyof A & string} T
     * @param {T} type
     * @param {A[T]['request']} body
     * @param {{transfer?: Transferable[], onEvent?: (event: NonNullable<A[T]['event']>) => void}} [options]
     * @returns {Promise<A[T]['result']>}
     */
    request(type, body, options) {
        return this.send(type, body, options).result;
    }

    /**
     * A message from the other side: an answer settles its request, an event goes to its request's onEvent.
     * @param {any} message
     */
    receive(message) {
        const id = String(message?.id);
        const waiting = this.waiting.get(id);
        if (!waiting) return;
        if (message.type === 'result') {
            this.waiting.delete(id);
            waiting.resolve(message.result);
        } else if (message.type === 'error') {
            this.waiting.delete(id);
            waiting.reject(deserializeError(message.error));
        } else {
            waiting.onEvent?.(message);
        }
    }

    /**
     * The other side can answer nothing more (it crashed, or was ended): every waiting request fails with `error`.
     * @param {Error} error
     */
    failAll(error) {
        const waiting = [...this.waiting.values()];
        this.waiting.clear();
        for (const { reject } of waiting) reject(error);
    }
}

/**
 * What a handler may do besides returning its result.
 * @typedef {Object} Reply
 * @property {string} id  The request's id (a later request may name it).
 * @property {(event: {type: string, [field: string]: unknown}, transfer?: Transferable[]) => void} event  Report an
 *   event of the request.
 * @property {(...buffers: Transferable[]) => void} transfer  Move these buffers with the result instead of copying.
 */

/**
 * @template {Api} A
 * @typedef {{[T in keyof A]: (body: A[T]['request'], reply: Reply) => Promise<A[T]['result']>}} Handlers
 */

/**
 * The answering side: every request `port` receives runs its handler (at once: a handler that must wait for another
 * waits itself) and is answered once, with the handler's result or the error it threw.
 * @template {Api} A
 * @param {Port & {onmessage: ((message: MessageEvent) => void) | null}} port
 * @param {Handlers<A>} handlers
 */
export function serve(port, handlers) {
    port.onmessage = async ({ data }) => {
        const id = String(data?.id ?? '');
        /** @type {Transferable[]} */
        let moved = [];
        /** @type {Reply} */
        const reply = {
            id,
            event: (event, transfer = []) => port.postMessage({ ...event, id }, transfer),
            transfer: (...buffers) => {
                moved = buffers;
            },
        };
        try {
            const type = data?.type;
            if (!Object.hasOwn(handlers, type)) {
                throw new InputError(
                    `Unknown request type ${JSON.stringify(type)}; expected one of ${Object.keys(handlers).join(', ')}.`,
                );
            }
            const result = await handlers[/** @type {keyof A} */ (type)](data, reply);
            port.postMessage({ type: 'result', id, result }, moved);
        } catch (err) {
            port.postMessage({ type: 'error', id, error: serializeError(err) }, []);
        }
    };
}
