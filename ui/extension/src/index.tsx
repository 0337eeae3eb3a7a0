// Registers the Terraform tab on infra.argocd.io/Terraform resources.
import { TerraformTab } from "./tab";

((window: any) => {
  window.extensionsAPI.registerResourceExtension(TerraformTab, "infra.argocd.io", "Terraform", "Terraform", {
    icon: "fa fa-cubes",
  });
})(window);
