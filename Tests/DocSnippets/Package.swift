// swift-tools-version:6.0
// Written by scripts/doc-snippets: the ```swift blocks of the docs, each an
// executable that depends on the products of sandboxed-run it imports, as a
// user's package does. Built by DocSnippetTests (and .ci/run) with
// --scratch-path ../../.build/doc-snippets.
import PackageDescription

// A package by path is known by its folder's name: whatever the clone is called.
let root = Context.packageDirectory.split(separator: "/").dropLast(2).last.map { $0.lowercased() } ?? ""

let package = Package(
    name: "DocSnippets",
    platforms: [.macOS(.v15)],
    dependencies: [.package(path: "../..")],
    targets: [
        .executableTarget(name: "readme-1", dependencies: [.product(name: "AppSandbox", package: root)], path: "readme-1"),
        .executableTarget(name: "docs-coordination-1", dependencies: [.product(name: "Coordination", package: root)], path: "docs-coordination-1"),
        .executableTarget(name: "docs-grants-1", dependencies: [.product(name: "AppSandbox", package: root)], path: "docs-grants-1"),
        .executableTarget(name: "docs-grants-2", dependencies: [.product(name: "AppSandbox", package: root)], path: "docs-grants-2"),
        .executableTarget(name: "docs-live-grants-1", dependencies: [.product(name: "AppSandbox", package: root)], path: "docs-live-grants-1"),
        .executableTarget(name: "docs-live-grants-2", dependencies: [.product(name: "AppSandbox", package: root)], path: "docs-live-grants-2"),
        .executableTarget(name: "docs-staging-1", dependencies: [.product(name: "AppSandbox", package: root)], path: "docs-staging-1"),
    ],
    swiftLanguageModes: [.v6]
)
