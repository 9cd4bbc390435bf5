import Foundation
import Testing

/// Every ```swift block of README.md and docs/*.md compiles as a user meets
/// it: `scripts/doc-snippets` copies each block into Tests/DocSnippets, a
/// package of its own that depends on this one by path and on exactly the
/// products the block imports. A block that breaks, uses a module it does not
/// import (`AppID` with only `import Grants`), or anything `package` or
/// internal, fails to build here.
@Suite(.serialized) struct DocSnippetTests {
    static let script = ManualTests.repository.appendingPathComponent("scripts/doc-snippets").path

    /// The copies are the docs' blocks, every fence names its language, and
    /// no Swift hides in a block labelled otherwise.
    @Test func theSnippetPackageIsTheDocsBlocks() throws {
        let result = try CLI.program("/usr/bin/python3", [Self.script, "--check"])
        #expect(result.status == 0, "\(result.stderr)")
    }

    /// In .build/doc-snippets, kept between runs: the first build compiles
    /// this package and swift-crypto again (about 5 minutes on 2 cores; .ci/run
    /// builds it before the tests), later ones only what changed.
    @Test func everyBlockCompilesAgainstTheProductsItImports() throws {
        let result = try CLI.program("/usr/bin/python3", [Self.script, "--build"])
        let errors = (result.stdout + result.stderr).split(separator: "\n").filter { $0.contains("error") }
        #expect(result.status == 0, "\(errors.prefix(40).joined(separator: "\n"))")
    }
}
