/** An API failure as people read it: the problem's title and detail, and any per-field messages. */
export class ApiError extends Error {
  constructor(
    readonly title: string,
    readonly detail: string,
    readonly fields: FieldErrors = {},
    readonly status?: number,
    readonly code?: string,
  ) {
    super(`${title}: ${detail}`);
  }
}

/** Messages by input field path (`name`, `datastore.pool`, …). */
export type FieldErrors = Record<string, string>;

/** A GraphQL error as the server sends it. */
export type GraphQLErrorJson = {
  message: string;
  path?: unknown[];
  extensions?: { code?: string; fields?: unknown };
};

/** An RFC 9457 problem document, from a non-200 answer. */
export function fromProblem(status: number, body: unknown): ApiError {
  const problem = (body ?? {}) as { title?: string; detail?: string; errors?: unknown };
  const title = problem.title ?? `HTTP ${status}`;
  const detail = problem.detail ?? 'The server refused the request.';
  return new ApiError(title, detail, fieldList(problem.errors), status);
}

/** The first GraphQL error, with its code as the title and field messages from `extensions.fields`. */
export function fromGraphQL(errors: GraphQLErrorJson[]): ApiError {
  const first = errors[0] ?? { message: 'Unknown error' };
  const code = first.extensions?.code;
  return new ApiError(titleOf(code), first.message, fieldList(first.extensions?.fields), undefined, code);
}

/** `[{field, message}]` (or an object of them) as a map. */
function fieldList(value: unknown): FieldErrors {
  const out: FieldErrors = {};
  const items = Array.isArray(value) ? value : value && typeof value === 'object' ? Object.values(value) : [];
  for (const item of items as { field?: string; message?: string }[]) {
    if (item && typeof item.field === 'string') out[item.field] = item.message ?? 'is invalid';
  }
  return out;
}

/** A heading for a GraphQL error code. */
function titleOf(code: string | undefined): string {
  const titles: Record<string, string> = {
    NOT_FOUND: 'Not found',
    FORBIDDEN: 'Not allowed',
    UNAUTHENTICATED: 'Not signed in',
    BAD_USER_INPUT: 'Invalid input',
    CONFLICT: 'Conflict',
    RATE_LIMITED: 'Too many requests',
    UNAVAILABLE: 'Unavailable',
    INTERNAL: 'Server error',
  };
  return (code && titles[code]) || 'Request failed';
}

/** A network failure or anything else thrown, as an ApiError. */
export function asApiError(error: unknown): ApiError {
  if (error instanceof ApiError) return error;
  const message = error instanceof Error ? error.message : String(error);
  return new ApiError('Network error', message);
}

/** GraphQL `userErrors` as field messages; errors without a field go under `''`. */
export function fromUserErrors(errors: { field: string | null; message: string }[]): FieldErrors {
  const out: FieldErrors = {};
  for (const e of errors) {
    const key = e.field ?? '';
    out[key] = out[key] ? `${out[key]} ${e.message}` : e.message;
  }
  return out;
}
