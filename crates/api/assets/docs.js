// Tenantplane: Swagger UI (vendored, /assets/swagger-ui-bundle.js) on this server's OpenAPI document.
// "Authorize" takes a bearer token; it is kept in this tab only.
window.ui = SwaggerUIBundle({
  url: "/api/v1/openapi.json",
  dom_id: "#ui",
  deepLinking: true,
  persistAuthorization: false,
});
