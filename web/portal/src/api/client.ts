import type { TypedDocument } from '../graphql/generated';
import { currentToken } from '../session';
import { ApiError, fromGraphQL, fromProblem, type GraphQLErrorJson } from './errors';

/** Called when the server says the token no longer works (401). */
let onUnauthorized: () => void = () => {};

/** Registers what happens on a 401 (the app signs out). */
export function setUnauthorizedHandler(handler: () => void): void {
  onUnauthorized = handler;
}

/** Runs a query or mutation over HTTP; throws an ApiError with the problem's or GraphQL error's text. */
export async function request<R, V>(document: TypedDocument<R, V>, variables: V): Promise<R> {
  const response = await fetch('/graphql', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${currentToken() ?? ''}` },
    body: JSON.stringify({ query: document, variables }),
  });
  const body = await response.json().catch(() => null);
  if (response.status === 401) onUnauthorized();
  if (!response.ok) throw fromProblem(response.status, body);
  const result = body as { data?: R | null; errors?: GraphQLErrorJson[] };
  if (result.errors?.length) throw fromGraphQL(result.errors);
  if (!result.data) throw new ApiError('Empty answer', 'The server answered without data.');
  return result.data;
}
