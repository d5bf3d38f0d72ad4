//! The etcd v3 API code in `src/etcd/api/` is generated from etcd's .proto files and
//! committed, so that building Ferrobay needs no protoc. This test generates it again, with
//! the pure-Rust protobuf compiler protox and the generator etcd-client itself uses
//! (tonic-prost-build, client side only), from the .proto files in the etcd-client package
//! pinned by Cargo.lock, and fails if a committed file differs or is missing or extra.
//!
//! After a change of those versions, write the new files with
//! `FERROBAY_WRITE_ETCD_API=1 cargo test -p meta --test etcd_api`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Set (to anything) to write the generated files instead of comparing them.
const WRITE_ENV: &str = "FERROBAY_WRITE_ETCD_API";
/// The package whose `proto/` directory holds etcd's .proto files (as etcd's repository has
/// them, less the gogoproto annotations).
const PROTO_PACKAGE: &str = "etcd-client";
/// The one file compiled; it imports the rest.
const RPC_PROTO: &str = "etcd/api/etcdserverpb/rpc.proto";
/// The protobuf packages generated: the RPC services and their messages, and the two
/// packages whose messages they carry. The imports that only define options (versionpb,
/// google.api, the OpenAPI annotations) generate nothing the client uses.
const PACKAGES: [&str; 3] = ["authpb", "etcdserverpb", "mvccpb"];

fn api_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/etcd/api")
}

/// The etcd-client package's version and directory, from `cargo metadata` (which fetches
/// the package into cargo's registry cache if it is not there yet).
fn proto_package() -> (String, PathBuf) {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--manifest-path",
        ])
        .arg(&manifest)
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("cargo metadata output is JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let mut found = packages
        .iter()
        .filter(|p| p["name"] == PROTO_PACKAGE)
        .map(|p| {
            let version = p["version"].as_str().expect("version").to_owned();
            let manifest = PathBuf::from(p["manifest_path"].as_str().expect("manifest_path"));
            (version, manifest.parent().expect("package dir").to_owned())
        });
    let package = found
        .next()
        .unwrap_or_else(|| panic!("{PROTO_PACKAGE} is not in Cargo.lock"));
    assert!(found.next().is_none(), "two versions of {PROTO_PACKAGE}");
    package
}

fn header(version: &str) -> String {
    format!(
        "// @generated from etcd's v3 API .proto files (package {PROTO_PACKAGE} {version}, \
         proto/{RPC_PROTO}),\n\
         // by protox and tonic-prost-build (client side only). Do not edit: regenerate with\n\
         //   {WRITE_ENV}=1 cargo test -p meta --test etcd_api\n"
    )
}

/// File name -> contents (with the header) of the generated code.
fn generate() -> BTreeMap<String, String> {
    let (version, package_dir) = proto_package();
    let proto_root = package_dir.join("proto");
    let mut fds = protox::compile([RPC_PROTO], [&proto_root])
        .unwrap_or_else(|e| panic!("compile {}: {e:?}", proto_root.join(RPC_PROTO).display()));
    fds.file
        .retain(|f| PACKAGES.contains(&f.package.as_deref().unwrap_or_default()));
    let out = tempfile::tempdir().expect("temp dir");
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .out_dir(out.path())
        .compile_fds(fds)
        .expect("generate the etcd API code");
    let header = header(&version);
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(out.path()).expect("read generated dir") {
        let path = entry.expect("dir entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("file name")
            .to_owned();
        let code = std::fs::read_to_string(&path).expect("read generated file");
        files.insert(name, format!("{header}{code}"));
    }
    files
}

/// The committed generated files (every `.rs` in the API dir but `mod.rs`).
fn committed() -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(api_dir()).expect("read src/etcd/api") {
        let path = entry.expect("dir entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("file name")
            .to_owned();
        if name.ends_with(".rs") && name != "mod.rs" {
            let code = std::fs::read_to_string(&path).expect("read committed file");
            files.insert(name, code);
        }
    }
    files
}

#[test]
fn committed_etcd_api_is_generated_from_the_proto_files() {
    let generated = generate();
    assert_eq!(
        generated.keys().collect::<Vec<_>>(),
        PACKAGES
            .map(|p| format!("{p}.rs"))
            .iter()
            .collect::<Vec<_>>(),
        "generated files"
    );
    if std::env::var_os(WRITE_ENV).is_some() {
        for (name, code) in &generated {
            std::fs::write(api_dir().join(name), code).expect("write generated file");
        }
        for name in committed().keys().filter(|n| !generated.contains_key(*n)) {
            std::fs::remove_file(api_dir().join(name)).expect("remove stale file");
        }
        eprintln!("wrote {} files to {}", generated.len(), api_dir().display());
        return;
    }
    let committed = committed();
    assert_eq!(
        committed.keys().collect::<Vec<_>>(),
        generated.keys().collect::<Vec<_>>(),
        "files in {}: regenerate with {WRITE_ENV}=1 cargo test -p meta --test etcd_api",
        api_dir().display()
    );
    for (name, code) in &generated {
        // The first differing line, not 5000 lines of assert_eq output.
        let first_diff = code
            .lines()
            .zip(committed[name].lines())
            .position(|(a, b)| a != b)
            .map_or("length".to_owned(), |i| format!("line {}", i + 1));
        assert!(
            committed[name] == *code,
            "src/etcd/api/{name} differs from the generated code ({first_diff}): \
             regenerate with {WRITE_ENV}=1 cargo test -p meta --test etcd_api"
        );
    }
}
