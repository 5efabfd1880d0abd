/** The broker's error envelope, `{"error_code": 40402, "message": "topic 'x' not found"}`, and its
 * optional fields (`owner` for 40404, `brokers` for 42101, `topic` ... `max_offset` for 40014, `line`
 * and `column` for 40015). */
export interface ErrorBody {
  error_code: number;
  message: string;
  [field: string]: unknown;
}

export interface WharfErrorInit {
  /** HTTP status (`error_code / 100` for an envelope); for a WebSocket close 4xxx, the close code less 4000. */
  status: number;
  /** The broker's `error_code` (40402, ...); 0 when the broker gave none (no answer, a proxy's page). */
  errorCode: number;
  message: string;
  /** The whole envelope, for the fields some codes add. */
  body?: ErrorBody | undefined;
  /** The WebSocket close code, for an error that ended a socket. */
  closeCode?: number | undefined;
  cause?: unknown;
}

/**
 * Every failure the client reports: an HTTP error answer (from the broker's envelope), a WebSocket
 * closed for good (from its close code and reason, `4404 "40402 topic 'x' not found"`), an error
 * result of a produce, or no answer at all (`status` 0, `errorCode` 0).
 */
export class WharfError extends Error {
  readonly status: number;
  readonly errorCode: number;
  readonly body: ErrorBody | undefined;
  readonly closeCode: number | undefined;

  constructor(init: WharfErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = "WharfError";
    this.status = init.status;
    this.errorCode = init.errorCode;
    this.body = init.body;
    this.closeCode = init.closeCode;
  }

  /** An error from an envelope (`{"error_code", "message", ...}`), or from a status alone. */
  static fromEnvelope(status: number, body: unknown): WharfError {
    if (isEnvelope(body)) {
      return new WharfError({ status, errorCode: body.error_code, message: body.message, body });
    }
    return new WharfError({ status, errorCode: 0, message: `HTTP ${status}` });
  }

  /** An error from a WebSocket close: code 4xxx is `4000 + HTTP status`, and the reason starts
   * with the broker's error code (`"40402 topic 'x' not found"`). */
  static fromClose(code: number, reason: string): WharfError {
    const match = /^(\d{5})\s+([\s\S]*)$/.exec(reason);
    const errorCode = match ? Number(match[1]) : 0;
    const message = match ? match[2]! : reason || `the WebSocket closed with ${code}`;
    const status = code >= 4000 && code < 5000 ? code - 4000 : Math.floor(errorCode / 100);
    return new WharfError({ status, errorCode, message, closeCode: code });
  }
}

export function isEnvelope(body: unknown): body is ErrorBody {
  return (
    typeof body === "object" &&
    body !== null &&
    typeof (body as { error_code?: unknown }).error_code === "number" &&
    typeof (body as { message?: unknown }).message === "string"
  );
}
