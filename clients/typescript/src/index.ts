// A thin typed client for the Tenantplane REST API: openapi-fetch over the types that openapi-typescript
// generates from the committed document (`src/schema.d.ts`, from `../../schema/openapi.json`; regenerate
// both with `make generate`). Paths are the document's, relative to its server `/api/v1`.

import createClient, { type Client } from "openapi-fetch";

import type { components, paths } from "./schema.js";

export type { components, operations, paths } from "./schema.js";

export type Schemas = components["schemas"];
export type Accepted = Schemas["Accepted"];
export type ControlPlane = Schemas["ControlPlane"];
export type CreateControlPlane = Schemas["CreateControlPlane"];
export type Operation = Schemas["Operation"];
export type Problem = Schemas["Problem"];

export type TenantplaneClient = Client<paths>;

export interface ClientOptions {
  /** The API root, the document's server: `http://127.0.0.1:8080/api/v1`. */
  baseUrl: string;
  /** A bearer token (a tenant token from `POST /tenants/{tenant}/tokens`, or a platform-admin token). */
  token: string;
  /** A fetch of your own (tests, proxies); the global fetch otherwise. */
  fetch?: (input: Request) => Promise<Response>;
}

/** A client whose every call sends `authorization: Bearer <token>`. */
export function createTenantplaneClient(options: ClientOptions): TenantplaneClient {
  return createClient<paths>({
    baseUrl: options.baseUrl.replace(/\/+$/, ""),
    headers: { authorization: `Bearer ${options.token}` },
    ...(options.fetch === undefined ? {} : { fetch: options.fetch }),
  });
}

/** An answer other than 2xx: the HTTP status and, when the server sent one, its problem document. */
export class TenantplaneError extends Error {
  readonly status: number;
  readonly problem: Problem | undefined;

  constructor(what: string, response: Response, problem: Problem | undefined) {
    const detail = problem?.detail ?? problem?.title ?? response.statusText;
    const request = problem?.requestId ?? response.headers.get("x-request-id");
    super(`${what}: ${response.status} ${detail}${request ? ` (request ${request})` : ""}`);
    this.name = "TenantplaneError";
    this.status = response.status;
    this.problem = problem;
  }
}

/** The states in which an operation is over. */
export const FINAL_STATES: readonly string[] = ["succeeded", "failed"];

export interface WaitOptions {
  /** Give up (with an error) after this long. */
  timeoutMs: number;
  /** Pause after a 503 without `Retry-After` (default 500 ms); other answers are asked again at once,
   * since each one waited on the server. */
  intervalMs?: number;
  /** Stops the wait early. */
  signal?: AbortSignal;
  /** Called with each answer that differs from the one before (a new stage or state). */
  onChange?: (operation: Operation) => void;
}

const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });

/**
 * Long-polls `GET /tenants/{tenant}/operations/{id}?waitSeconds=…` (the server answers at the operation's
 * next change, or after at most that many seconds) until the operation is `done` and returns it; a failed
 * operation is returned too, not thrown. `onChange` sees each new answer (a stage reached). A 503 (the
 * database or the management cluster is unavailable) is waited out (its `Retry-After`, within the
 * timeout); any other error answer throws a {@link TenantplaneError}.
 */
export async function waitForOperation(
  client: TenantplaneClient,
  tenant: string,
  operationId: string,
  options: WaitOptions,
): Promise<Operation> {
  const deadline = Date.now() + options.timeoutMs;
  const interval = options.intervalMs ?? 500;
  let last: string | undefined;
  for (;;) {
    const waitSeconds = Math.max(0, Math.min(60, Math.floor((deadline - Date.now()) / 1000)));
    const { data, error, response } = await client.GET("/tenants/{tenant}/operations/{id}", {
      params: { path: { tenant, id: operationId }, query: { waitSeconds } },
      ...(options.signal === undefined ? {} : { signal: options.signal }),
    });
    let pause = 0;
    if (data !== undefined) {
      if (data.done) {
        return data;
      }
      const now = `state ${data.state}, stage ${data.stage ?? "none"}`;
      if (now !== last) {
        options.onChange?.(data);
      }
      // An answer before the wait was up is a change: ask again at once. One that waited it out, too.
      last = now;
    } else if (response.status === 503) {
      last = new TenantplaneError("operation", response, error).message;
      const retryAfter = Number(response.headers.get("retry-after"));
      pause = Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter * 1000 : interval;
    } else {
      throw new TenantplaneError(`operation ${operationId}`, response, error);
    }
    const left = deadline - Date.now();
    if (left <= 0) {
      throw new Error(`operation ${operationId} not done after ${options.timeoutMs} ms (last: ${last})`);
    }
    await sleep(Math.min(pause, left), options.signal);
  }
}
