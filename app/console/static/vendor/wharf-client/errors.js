// @wharf/client 0.1.0: clients/js/dist/errors.js, copied by clients/js/scripts/vendor.mjs (npm run build). Do not edit.
/**
 * Every failure the client reports: an HTTP error answer (from the broker's envelope), a WebSocket
 * closed for good (from its close code and reason, `4404 "40402 topic 'x' not found"`), an error
 * result of a produce, or no answer at all (`status` 0, `errorCode` 0).
 */
export class WharfError extends Error {
    status;
    errorCode;
    body;
    closeCode;
    constructor(init) {
        super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
        this.name = "WharfError";
        this.status = init.status;
        this.errorCode = init.errorCode;
        this.body = init.body;
        this.closeCode = init.closeCode;
    }
    /** An error from an envelope (`{"error_code", "message", ...}`), or from a status alone. */
    static fromEnvelope(status, body) {
        if (isEnvelope(body)) {
            return new WharfError({ status, errorCode: body.error_code, message: body.message, body });
        }
        return new WharfError({ status, errorCode: 0, message: `HTTP ${status}` });
    }
    /** An error from a WebSocket close: code 4xxx is `4000 + HTTP status`, and the reason starts
     * with the broker's error code (`"40402 topic 'x' not found"`). */
    static fromClose(code, reason) {
        const match = /^(\d{5})\s+([\s\S]*)$/.exec(reason);
        const errorCode = match ? Number(match[1]) : 0;
        const message = match ? match[2] : reason || `the WebSocket closed with ${code}`;
        const status = code >= 4000 && code < 5000 ? code - 4000 : Math.floor(errorCode / 100);
        return new WharfError({ status, errorCode, message, closeCode: code });
    }
}
export function isEnvelope(body) {
    return (typeof body === "object" &&
        body !== null &&
        typeof body.error_code === "number" &&
        typeof body.message === "string");
}
