// Checks the portal's GraphQL operations (src/graphql/*.graphql) against the committed schema
// (../../schema/schema.graphql) and writes their TypeScript types and documents to
// src/graphql/generated.ts. Any invalid operation fails with its file and line; `--check` fails when
// the generated file is not up to date instead of writing it.
import { readFileSync, readdirSync, writeFileSync, existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  Kind, Source, buildSchema, concatAST, isAbstractType, isEnumType,
  isListType, isNonNullType, isScalarType, parse, print, stripIgnoredCharacters,
  typeFromAST, validate,
} from 'graphql';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const schemaPath = join(root, '../../schema/schema.graphql');
const documentsDir = join(root, 'src/graphql');
const outputPath = join(documentsDir, 'generated.ts');

/** TypeScript types of the schema's scalars. */
const SCALARS = {
  ID: 'string', String: 'string', Int: 'number', Float: 'number', Boolean: 'boolean',
  DateTime: 'string', UUID: 'string', Int64: 'string', JSON: 'unknown',
};

/** Parses every operation file, each as its own source so errors name it. */
function loadDocuments() {
  const files = readdirSync(documentsDir).filter((f) => f.endsWith('.graphql')).sort();
  return concatAST(files.map((f) => parse(new Source(readFileSync(join(documentsDir, f), 'utf8'), `src/graphql/${f}`))));
}

/** Fails with every validation error, each with its file and line. */
function check(schema, document) {
  const errors = [...validate(schema, document)];
  for (const def of document.definitions) {
    if (def.kind === Kind.OPERATION_DEFINITION && !def.name) errors.push(new Error('every operation needs a name'));
  }
  if (errors.length === 0) return;
  for (const error of errors) {
    const where = (error.locations ?? []).map((l) => `${error.source?.name ?? ''}:${l.line}:${l.column}`).join(' ');
    console.error(`GraphQL: ${error.message} ${where}`);
  }
  console.error(`codegen: ${errors.length} invalid operation(s) against ${schemaPath}`);
  process.exit(1);
}

/** Emits named TypeScript types for the enums and input objects the operations use. */
class Emitter {
  constructor(schema, fragments) {
    this.schema = schema;
    this.fragments = fragments;
    this.named = new Map();
  }

  /** The TS type of a named enum or input object, emitted once. */
  namedType(type) {
    if (!this.named.has(type.name)) {
      this.named.set(type.name, '');
      this.named.set(type.name, isEnumType(type) ? this.enumType(type) : this.inputType(type));
    }
    return type.name;
  }

  enumType(type) {
    const values = type.getValues().map((v) => `'${v.name}'`).join(' | ');
    return `export type ${type.name} = ${values};`;
  }

  inputType(type) {
    const fields = Object.values(type.getFields()).map((f) => {
      const optional = !isNonNullType(f.type) || f.defaultValue !== undefined;
      return `  ${f.name}${optional ? '?' : ''}: ${this.inputRef(f.type)};`;
    });
    return `export type ${type.name} = {\n${fields.join('\n')}\n};`;
  }

  /** An input position's type: nullable ones also take null. */
  inputRef(type) {
    if (isNonNullType(type)) return this.inputInner(type.ofType);
    return `${this.inputInner(type)} | null`;
  }

  inputInner(type) {
    if (isListType(type)) return `Array<${this.inputRef(type.ofType)}>`;
    if (isScalarType(type)) return SCALARS[type.name] ?? 'unknown';
    return this.namedType(type);
  }

  /** An output field's type for its selection. */
  outputRef(type, selections, indent) {
    if (isNonNullType(type)) return this.outputInner(type.ofType, selections, indent);
    return `${this.outputInner(type, selections, indent)} | null`;
  }

  outputInner(type, selections, indent) {
    if (isListType(type)) return `Array<${this.outputRef(type.ofType, selections, indent)}>`;
    if (isScalarType(type)) return SCALARS[type.name] ?? 'unknown';
    if (isEnumType(type)) return this.namedType(type);
    const concrete = isAbstractType(type) ? this.schema.getPossibleTypes(type) : [type];
    const variants = [...new Set(concrete.map((t) => this.objectType(t, selections, indent)))];
    return variants.length === 1 ? variants[0] : `(${variants.join(' | ')})`;
  }

  /** The object type that `selections` select on the concrete type `type`. */
  objectType(type, selections, indent) {
    const fields = new Map();
    this.collect(type, selections, fields, false);
    const pad = '  '.repeat(indent + 1);
    const lines = [...fields].map(([key, { name, optional, subselections }]) => {
      const fieldType = name === '__typename' ? `'${type.name}'` : this.outputRef(type.getFields()[name].type, subselections, indent + 1);
      return `${pad}${key}${optional ? '?' : ''}: ${fieldType};`;
    });
    return `{\n${lines.join('\n')}\n${'  '.repeat(indent)}}`;
  }

  /** Gathers the fields `selections` pick on `type`, merging fragments that apply to it. */
  collect(type, selections, fields, optional) {
    for (const selection of selections) {
      const conditional = optional || (selection.directives ?? []).some((d) => ['include', 'skip'].includes(d.name.value));
      if (selection.kind === Kind.FIELD) {
        const key = selection.alias?.value ?? selection.name.value;
        const entry = fields.get(key) ?? { name: selection.name.value, optional: conditional, subselections: [] };
        entry.subselections.push(...(selection.selectionSet?.selections ?? []));
        fields.set(key, entry);
      } else {
        const fragment = selection.kind === Kind.FRAGMENT_SPREAD ? this.fragments.get(selection.name.value) : selection;
        if (this.applies(type, fragment.typeCondition)) this.collect(type, fragment.selectionSet.selections, fields, conditional);
      }
    }
  }

  applies(type, condition) {
    if (!condition || condition.name.value === type.name) return true;
    const target = this.schema.getType(condition.name.value);
    return isAbstractType(target) && this.schema.isSubType(target, type);
  }
}

/** The fragments an operation uses, directly or through other fragments, in name order. */
function usedFragments(node, fragments, seen = new Set()) {
  const visit = (selections) => {
    for (const s of selections ?? []) {
      if (s.kind === Kind.FRAGMENT_SPREAD && !seen.has(s.name.value)) {
        seen.add(s.name.value);
        visit(fragments.get(s.name.value).selectionSet.selections);
      }
      visit(s.selectionSet?.selections);
    }
  };
  visit(node.selectionSet.selections);
  return [...seen].sort().map((name) => fragments.get(name));
}

/** The TypeScript of one operation: its result, its variables and its document. */
function operationCode(schema, emitter, operation, fragments) {
  const name = operation.name.value;
  const suffix = { query: 'Query', mutation: 'Mutation', subscription: 'Subscription' }[operation.operation];
  const rootType = schema.getRootType(operation.operation);
  const variables = (operation.variableDefinitions ?? []).map((v) => {
    const type = typeFromAST(schema, v.type);
    const optional = !isNonNullType(type) || v.defaultValue !== undefined;
    return `  ${v.variable.name.value}${optional ? '?' : ''}: ${emitter.inputRef(type)};`;
  });
  const source = [operation, ...usedFragments(operation, fragments)].map((d) => print(d)).join('\n');
  return [
    `export type ${name}${suffix} = ${emitter.objectType(rootType, operation.selectionSet.selections, 0)};`,
    `export type ${name}Variables = {${variables.length ? `\n${variables.join('\n')}\n` : ''}};`,
    `export const ${name}Document = ${JSON.stringify(stripIgnoredCharacters(source))} as TypedDocument<${name}${suffix}, ${name}Variables>;`,
  ].join('\n');
}

/** The whole generated module. */
function generate() {
  const schema = buildSchema(readFileSync(schemaPath, 'utf8'));
  const document = loadDocuments();
  check(schema, document);
  const fragments = new Map(document.definitions.filter((d) => d.kind === Kind.FRAGMENT_DEFINITION).map((d) => [d.name.value, d]));
  const emitter = new Emitter(schema, fragments);
  const operations = document.definitions
    .filter((d) => d.kind === Kind.OPERATION_DEFINITION)
    .sort((a, b) => a.name.value.localeCompare(b.name.value))
    .map((op) => operationCode(schema, emitter, op, fragments));
  const named = [...emitter.named.keys()].sort().map((k) => emitter.named.get(k));
  return [
    '// Generated by scripts/codegen.mjs from src/graphql/*.graphql, checked against ../../schema/schema.graphql.',
    '// Do not edit: run `npm run codegen`.',
    '',
    '/** A GraphQL document that carries its result and variables types. */',
    'export type TypedDocument<Result, Variables> = string & { readonly __result?: Result; readonly __variables?: Variables };',
    '',
    named.join('\n\n'),
    '',
    operations.join('\n\n'),
    '',
  ].join('\n');
}

const code = generate();
if (process.argv.includes('--check')) {
  if (!existsSync(outputPath) || readFileSync(outputPath, 'utf8') !== code) {
    console.error('codegen: src/graphql/generated.ts is out of date; run `npm run codegen`');
    process.exit(1);
  }
} else if (!existsSync(outputPath) || readFileSync(outputPath, 'utf8') !== code) {
  writeFileSync(outputPath, code);
  console.log('codegen: wrote src/graphql/generated.ts');
}
