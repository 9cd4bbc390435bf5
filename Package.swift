// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "sandboxed-run",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "sandboxed-run", targets: ["sandboxed-run"]),
        .library(name: "Sandbox", targets: ["Sandbox"]),
        .library(name: "Grants", targets: ["Grants"]),
        .library(name: "Coordination", targets: ["Coordination"]),
        .library(name: "AppSandbox", targets: ["AppSandbox"]),
        .library(name: "Staging", targets: ["Staging"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        // The network by name: the proxy's parsers of hostile bytes (HTTP/1.1,
        // SOCKS5, a TLS ClientHello's server name) and its event loop.
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
    ],
    targets: [
        // Thin syscall wrappers and copied kernel structs, one file per concern.
        .target(name: "CSyscalls"),
        // The only code between fork and exec: the keeper and the confined child.
        .target(name: "CLaunch", dependencies: ["CSyscalls"]),
        .systemLibrary(name: "CSeccomp", pkgConfig: "libseccomp", providers: [.apt(["libseccomp-dev"])]),
        .systemLibrary(name: "CCap", pkgConfig: "libcap", providers: [.apt(["libcap-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        // The shipped policy files, embedded so the default needs no file at run time.
        .target(
            name: "Policies",
            path: "Policies",
            exclude: ["README.md"],
            resources: [
                .embedInCode("writer.plist"),
                .embedInCode("read-only.plist"),
                .embedInCode("networked.plist"),
                .embedInCode("developer.plist"),
            ]
        ),
        // The floor: descriptors, paths as bytes, retrying, escaping, one
        // ancestry walker, link trust, one resolver of a child's paths. No policy.
        .target(name: "SystemKit", dependencies: ["CSyscalls", .product(name: "SystemPackage", package: "swift-system")]),
        // Bounded readers of XML and binary property lists and JSON (policies, placeholders).
        .target(name: "PropertyLists", dependencies: ["SystemKit"]),
        // The network by name: a proxy and a DNS stub served by the launcher
        // on sockets that exist only in the sandbox's network namespace.
        .target(
            name: "Egress",
            dependencies: [
                "SystemKit", "CSyscalls",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSOCKS", package: "swift-nio-extras"),
            ]
        ),
        .target(
            name: "Sandbox",
            dependencies: [
                "SystemKit", "PropertyLists", "CSyscalls", "CLaunch", "CSeccomp", "CCap", "Egress",
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        // Grants needs swift-crypto (BoringSSL, about two minutes to build): its own target.
        .target(
            name: "Grants",
            dependencies: [
                "Sandbox", "SystemKit", "CSyscalls", "CSQLite",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        // Coordinated writes into folders a sync daemon also touches: the floor
        // only (no seccomp, no capabilities, no crypto, no SQLite).
        .target(
            name: "Coordination",
            dependencies: ["SystemKit", "PropertyLists", "CSyscalls", .product(name: "SystemPackage", package: "swift-system")],
            exclude: ["PROTOCOL.md"]
        ),
        // Staged grants: a read-write grant's changes held in the broker's
        // state (a clone of the folder), listed, diffed, and applied as a
        // coordinated writer or thrown away.
        .target(
            name: "Staging",
            dependencies: ["Grants", "Coordination", "Sandbox", "SystemKit", "CSyscalls", .product(name: "SystemPackage", package: "swift-system")]
        ),
        // The trust boundary, owned in one place: locations, protected
        // folders, link trust, policy-file trust, launching with grants.
        .target(name: "AppSandbox", dependencies: ["Sandbox", "Grants", "Staging", .product(name: "SystemPackage", package: "swift-system")]),
        .executableTarget(
            name: "sandboxed-run",
            dependencies: [
                "AppSandbox", "Coordination",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // An app written only against the Apple-like API (SecurityScope, OpenPanel,
        // SecurityScopedURL): the same binary unconfined and under `run`.
        .executableTarget(name: "scoped-notes", dependencies: ["AppSandbox"], path: "Examples/ScopedNotes"),
        // A launcher on the library (SandboxSession.launch), as docs/live-grants.md shows it.
        .executableTarget(name: "swift-launcher", dependencies: ["AppSandbox"], path: "Examples/SwiftLauncher"),
        .executableTarget(name: "grants-benchmark", dependencies: ["Grants", "Sandbox"], path: "Benchmarks/GrantsBenchmark"),
        .executableTarget(
            name: "bookmark-fuzzer",
            dependencies: ["Grants", "Sandbox", .product(name: "Crypto", package: "swift-crypto")],
            path: "Fuzz/BookmarkFuzzer"
        ),
        // What Foundation reads from a policy's bytes: the oracle of the fuzzer and the agreement tests.
        .target(name: "PolicyOracle", dependencies: ["PropertyLists"], path: "Fuzz/PolicyOracle"),
        .executableTarget(name: "policy-fuzzer", dependencies: ["Sandbox", "Policies", "PolicyOracle"], path: "Fuzz/PolicyFuzzer"),
        // What every message on the live-grant broker's socket must get: the oracle of the fuzzer and of LiveGrantFuzzTests.
        .target(name: "LiveGrantOracle", dependencies: ["Sandbox"], path: "Fuzz/LiveGrantOracle"),
        .executableTarget(name: "live-grant-fuzzer", dependencies: ["Sandbox", "LiveGrantOracle"], path: "Fuzz/LiveGrantFuzzer"),
        .testTarget(
            name: "SandboxTests",
            dependencies: ["Sandbox", "CSyscalls", "CLaunch", "CSeccomp", "Policies", "PolicyOracle", "LiveGrantOracle"]
        ),
        .testTarget(name: "GrantsTests", dependencies: ["Grants", "Sandbox", "AppSandbox", "CSyscalls"]),
        .testTarget(name: "CLITests", dependencies: ["sandboxed-run", "grants-benchmark", "scoped-notes", "swift-launcher"]),
        .testTarget(name: "CoordinationTests", dependencies: ["Coordination", "Sandbox", "sandboxed-run"]),
        .testTarget(name: "EgressTests", dependencies: ["Egress", "Sandbox", "CSyscalls"]),
        .testTarget(name: "StagingTests", dependencies: ["Staging", "AppSandbox", "CSyscalls"]),
    ],
    swiftLanguageModes: [.v6]
)
