// End-to-end check of the client against a running Tenantplane (run by `tests/it/e2e/ts_client.rs`):
// creates a control plane, waits on its operation, downloads the kubeconfig. Every answer it uses is
// also checked against the committed document's schema for it (required fields, types, enums), since
// the compiled types are erased at run time: a field the types promise but the server does not send
// fails here.
//
// Environment: TENANTPLANE_URL (the API root, `http://127.0.0.1:8080/api/v1`), TENANTPLANE_TOKEN (a
// tenant-member token), TENANTPLANE_TENANT (the tenant's slug), TENANTPLANE_OPENAPI (the path of
// schema/openapi.json), TENANTPLANE_KUBECONFIG_OUT (where to write the kubeconfig); optional:
// TENANTPLANE_NAME (default `ts-client`), TENANTPLANE_KUBERNETES_VERSION (default `v1.34.4`),
// TENANTPLANE_POOL (the datastore pool), TENANTPLANE_TIMEOUT_MS (default 300000).
// Prints one JSON line: {"controlPlaneId", "operation", "kubeconfigBytes", "phase"}; exits 1 with a
// message on stderr on any failure.

import { readFileSync, writeFileSync } from "node:fs";

import {
  type CreateControlPlane,
  type Schemas,
  TenantplaneError,
  createTenantplaneClient,
  waitForOperation,
} from "./index.js";

function env(name: string): string {
  const value = process.env[name];
  if (value === undefined || value === "") {
    throw new Error(`${name} is not set`);
  }
  return value;
}

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** The JSON Schema type names that `value` satisfies. */
function typesOf(value: unknown): string[] {
  if (value === null) return ["null"];
  if (Array.isArray(value)) return ["array"];
  if (typeof value === "number") return Number.isInteger(value) ? ["integer", "number"] : ["number"];
  if (typeof value === "object") return ["object"];
  return [typeof value];
}

/**
 * Where `value` breaks `schema` (the document's keywords that shape a value: `$ref`, `oneOf`, `anyOf`,
 * `allOf`, `type`, `enum`, `const`, `required`, `properties`, `additionalProperties`, `items`; string
 * formats and patterns are schemathesis' part, `tests/it/api/contract.rs`).
 */
function violations(document: unknown, schema: unknown, value: unknown, at: string): string[] {
  if (schema === true || !isObject(schema)) return [];
  const ref = schema["$ref"];
  if (typeof ref === "string") {
    const target = ref
      .replace(/^#\//, "")
      .split("/")
      .reduce<unknown>((node, key) => (isObject(node) ? node[key] : undefined), document);
    if (target === undefined) return [`${at}: unresolved ${ref}`];
    return violations(document, target, value, at);
  }
  const out: string[] = [];
  for (const key of ["oneOf", "anyOf"] as const) {
    const branches = schema[key];
    if (Array.isArray(branches)) {
      const each = branches.map((b) => violations(document, b, value, at));
      if (!each.some((v) => v.length === 0)) {
        out.push(`${at}: matches no ${key} branch (${each.map((v) => v.join("; ")).join(" | ")})`);
      }
    }
  }
  const all = schema["allOf"];
  if (Array.isArray(all)) {
    for (const b of all) out.push(...violations(document, b, value, at));
  }
  const type = schema["type"];
  if (type !== undefined) {
    const allowed = Array.isArray(type) ? type : [type];
    if (!typesOf(value).some((t) => allowed.includes(t))) {
      return [...out, `${at}: ${JSON.stringify(value)} is not of type ${allowed.join(" or ")}`];
    }
  }
  const choices = schema["enum"];
  if (Array.isArray(choices) && !choices.some((c) => JSON.stringify(c) === JSON.stringify(value))) {
    out.push(`${at}: ${JSON.stringify(value)} is not one of ${JSON.stringify(choices)}`);
  }
  if ("const" in schema && JSON.stringify(schema["const"]) !== JSON.stringify(value)) {
    out.push(`${at}: ${JSON.stringify(value)} is not ${JSON.stringify(schema["const"])}`);
  }
  if (isObject(value)) {
    const required = schema["required"];
    if (Array.isArray(required)) {
      for (const key of required) {
        if (typeof key === "string" && !(key in value)) out.push(`${at}: required field ${key} is missing`);
      }
    }
    const properties = isObject(schema["properties"]) ? schema["properties"] : {};
    const additional = schema["additionalProperties"];
    for (const [key, v] of Object.entries(value)) {
      if (key in properties) {
        out.push(...violations(document, properties[key], v, `${at}.${key}`));
      } else if (additional === false) {
        out.push(`${at}: field ${key} is not in the document`);
      } else if (additional !== undefined) {
        out.push(...violations(document, additional, v, `${at}.${key}`));
      }
    }
  }
  const items = schema["items"];
  if (Array.isArray(value) && items !== undefined) {
    value.forEach((v, i) => out.push(...violations(document, items, v, `${at}[${i}]`)));
  }
  return out;
}

/** Fails unless `value` is what the document's schema `name` describes. */
function conforms(document: Json, name: keyof Schemas, value: unknown, what: string): void {
  const found = violations(document, { $ref: `#/components/schemas/${name}` }, value, name);
  if (found.length > 0) {
    throw new Error(`${what} does not match the document's ${name}:\n  ${found.join("\n  ")}`);
  }
}

async function main(): Promise<void> {
  const client = createTenantplaneClient({ baseUrl: env("TENANTPLANE_URL"), token: env("TENANTPLANE_TOKEN") });
  const tenant = env("TENANTPLANE_TENANT");
  const document = JSON.parse(readFileSync(env("TENANTPLANE_OPENAPI"), "utf8")) as Json;
  const out = env("TENANTPLANE_KUBECONFIG_OUT");
  const timeoutMs = Number(process.env["TENANTPLANE_TIMEOUT_MS"] ?? "300000");
  const pool = process.env["TENANTPLANE_POOL"];

  const body: CreateControlPlane = {
    name: process.env["TENANTPLANE_NAME"] ?? "ts-client",
    kubernetesVersion: process.env["TENANTPLANE_KUBERNETES_VERSION"] ?? "v1.34.4",
    replicas: 1,
    ...(pool === undefined ? {} : { datastore: { pool } }),
  };
  const created = await client.POST("/tenants/{tenant}/control-planes", {
    params: { path: { tenant } },
    body,
  });
  if (created.error !== undefined) {
    throw new TenantplaneError("create control plane", created.response, created.error);
  }
  if (created.response.status !== 202) {
    throw new Error(`create control plane: ${created.response.status}, not 202`);
  }
  conforms(document, "Accepted", created.data, "the create's 202 body");
  const { controlPlane, operation: accepted } = created.data;

  const stages: string[] = [];
  const operation = await waitForOperation(client, tenant, accepted.id, {
    timeoutMs,
    onChange: (op) => stages.push(op.stage ?? "none"),
  });
  stages.push(operation.stage ?? "none");
  conforms(document, "Operation", operation, "the finished operation");
  if (operation.state !== "succeeded") {
    throw new Error(`operation ${operation.id} ended ${operation.state}: ${operation.error ?? "(no error given)"}`);
  }

  // The operation succeeded, so the control plane serves: its kubeconfig is there at once.
  const kubeconfig = await client.GET("/tenants/{tenant}/control-planes/{id}/kubeconfig", {
    params: { path: { tenant, id: controlPlane.id } },
    parseAs: "text",
  });
  if (kubeconfig.error !== undefined) {
    throw new TenantplaneError("download the kubeconfig", kubeconfig.response, kubeconfig.error);
  }
  const contentType = kubeconfig.response.headers.get("content-type") ?? "";
  if (!contentType.startsWith("application/yaml")) {
    throw new Error(`kubeconfig: content-type ${contentType}, not application/yaml`);
  }
  writeFileSync(out, kubeconfig.data, { mode: 0o600 });

  const got = await client.GET("/tenants/{tenant}/control-planes/{id}", {
    params: { path: { tenant, id: controlPlane.id } },
  });
  if (got.error !== undefined) {
    throw new TenantplaneError("get control plane", got.response, got.error);
  }
  conforms(document, "ControlPlane", got.data, "the control plane");

  const line = {
    controlPlaneId: controlPlane.id,
    operation,
    kubeconfigBytes: Buffer.byteLength(kubeconfig.data),
    phase: got.data.phase,
    stagesSeen: stages,
  };
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

main().catch((e: unknown) => {
  process.stderr.write(`ts-client e2e: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exitCode = 1;
});
