import { createClient, type Client } from 'graphql-ws';
import type { TypedDocument } from '../graphql/generated';
import { currentToken } from '../session';
import { ApiError, fromGraphQL, type GraphQLErrorJson } from './errors';

/** One WebSocket (`graphql-transport-ws`) per token, shared by every subscription. */
let client: { token: string; ws: Client } | null = null;

function socket(): Client {
  const token = currentToken() ?? '';
  if (client?.token !== token) {
    client?.ws.dispose();
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    const ws = createClient({
      url: `${scheme}://${location.host}/graphql`,
      connectionParams: { Authorization: `Bearer ${token}` },
      retryAttempts: 20,
      shouldRetry: (e) => !(e instanceof CloseEvent && e.code === 4403),
    });
    client = { token, ws };
  }
  return client.ws;
}

/** Closes the socket (on sign-out). */
export function closeLive(): void {
  client?.ws.dispose();
  client = null;
}

/** Subscribes; `onData` gets each event. Returns the unsubscribe function. */
export function subscribe<R, V>(
  document: TypedDocument<R, V>,
  variables: V,
  onData: (data: R) => void,
  onError: (error: ApiError) => void,
): () => void {
  return socket().subscribe<R>(
    { query: document, variables: variables as Record<string, unknown> },
    {
      next: (result) => {
        if (result.errors?.length) onError(fromGraphQL(result.errors as unknown as GraphQLErrorJson[]));
        else if (result.data) onData(result.data);
      },
      error: (e) => onError(liveError(e)),
      complete: () => {},
    },
  );
}

/** A socket failure as an ApiError. */
function liveError(e: unknown): ApiError {
  if (Array.isArray(e)) return fromGraphQL(e as GraphQLErrorJson[]);
  if (e instanceof CloseEvent) return new ApiError('Live updates stopped', `The connection closed (${e.code} ${e.reason}).`);
  return new ApiError('Live updates stopped', e instanceof Error ? e.message : 'The connection failed.');
}
