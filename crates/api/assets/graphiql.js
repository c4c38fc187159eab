// Tenantplane: GraphiQL (vendored, /assets/graphiql.min.js) on this server's /graphql: queries and
// mutations over HTTP, subscriptions over WebSocket (graphql-transport-ws). The headers typed in the
// header editor, e.g. {"Authorization": "Bearer <token>"}, go with every HTTP request and, as the
// connection_init payload, authenticate the WebSocket.
(function () {
  var scheme = location.protocol === "https:" ? "wss://" : "ws://";
  var fetcher = GraphiQL.createFetcher({
    url: location.origin + "/graphql",
    subscriptionUrl: scheme + location.host + "/graphql",
  });
  ReactDOM.createRoot(document.getElementById("graphiql")).render(
    React.createElement(GraphiQL, {
      fetcher: fetcher,
      defaultHeaders: '{"Authorization": "Bearer <token>"}',
      isHeadersEditorEnabled: true,
    }),
  );
})();
